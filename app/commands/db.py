"""Event-store schema: `campusguard db upgrade` applies pending migrations, `db current` shows the revision.

The server also upgrades at startup (safe with several replicas); run `db upgrade` by hand
to migrate before a rollout, or to see a migration error without starting the service.
"""

from __future__ import annotations

import argparse

from app.config import Settings


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["upgrade", "current"], help="upgrade: apply pending migrations; "
                        "current: print the database's revision and whether it is the newest")
    parser.add_argument("--url", default=None, help="SQLAlchemy URL (default: CAMPUSGUARD_EVENTS_DB_URL)")


def run(args: argparse.Namespace) -> int:
    from app.rules.store.db import EventStore
    from app.rules.store.migrate import current_revision, head_revision

    store = EventStore(args.url or Settings().events_db_url, migrate=False)
    try:
        head = head_revision()
        if args.action == "upgrade":
            before, after = store.migrate()
            print(f"{store.safe_url}: {before or 'empty'} -> {after}" if before != after
                  else f"{store.safe_url}: already at {after} (head)")
            return 0
        rev = current_revision(store.engine)
        state = "head" if rev == head else f"pending: upgrade to {head}"
        print(f"{store.safe_url}: {rev or 'empty (never migrated)'} ({state})")
        return 0
    finally:
        store.close()
