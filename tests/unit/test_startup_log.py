"""The startup log stays readable (issue 42): Alembic's plugin lines and multi-line migration
texts are not logged at INFO; the event store's own one-line summary is."""

from __future__ import annotations

import logging

from sqlalchemy import create_engine

from app.core.logs import configure_logging
from app.rules.store.migrate import upgrade


def test_migrating_an_empty_store_logs_one_line(tmp_path, caplog):
    root = logging.getLogger()
    saved = root.handlers[:], root.level  # the session's secret watch sits on the root logger: put it back after
    try:
        configure_logging("text", "INFO")  # the server's setup (it replaces the root's handlers: caplog's again)
        root.addHandler(caplog.handler)
        engine = create_engine(f"sqlite:///{tmp_path / 'events.db'}")
        with caplog.at_level(logging.INFO):
            before, after = upgrade(engine)
        engine.dispose()
    finally:
        root.handlers[:], root.level = saved
    assert before is None and after
    assert not [r for r in caplog.records if r.name.startswith("alembic")], [r.getMessage() for r in caplog.records]
    summary = [r.getMessage() for r in caplog.records if r.name == "campusguard.rules.migrate"]
    assert summary == [f"event store migrated from empty to {after}"]
