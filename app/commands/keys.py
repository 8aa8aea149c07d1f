"""API keys: `campusguard keys new --role R --name N` makes one; `keys check FILE` validates a keys file.

`new` prints the secret once and the keys-file line that accepts it (the key's SHA-256, not
the key), so the server never holds the secret. Standard output is two lines, the secret
then the line, for scripts (or `--json`); the explanation goes to standard error. With
`--append FILE` the line is added to the keys file (validated first, written atomically,
mode 0600 for a new file; an existing file keeps its owner and mode, so root appending to
the replicas' 0400 file leaves it theirs) and only the secret is printed. A running server picks the change
up within CAMPUSGUARD_API_KEYS_WATCH_S (or at once on SIGHUP).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

from app.core.files import atomic_write
from app.core.keys import KeysFileError, new_key, parse_keys_file
from app.core.roles import ROLES


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="keys_action", required=True, metavar="ACTION")
    new = sub.add_parser("new", help="make a key: print the secret once and the keys-file line (its SHA-256)")
    new.add_argument("--role", required=True, choices=ROLES, help="what the key may do (docs/security.md)")
    new.add_argument("--name", required=True, help="who holds it: shown in logs, reviews and the audit trail")
    new.add_argument("--append", type=Path, default=None, metavar="FILE",
                     help="add the line to this keys file (CAMPUSGUARD_API_KEYS_FILE) and print only the secret")
    new.add_argument("--json", action="store_true", help="one JSON object: name, role, key, sha256, line")
    check = sub.add_parser("check", help="validate a keys file and list its names and roles (never a key)")
    check.add_argument("file", type=Path, help="the keys file (YAML)")


def run(args: argparse.Namespace) -> int:
    return _new(args) if args.keys_action == "new" else _check(args.file)


def _new(args: argparse.Namespace) -> int:
    try:
        key, line = new_key(args.role, args.name)
    except ValueError as exc:
        print(f"campusguard keys new: error: {exc}", file=sys.stderr)
        return 2
    if args.append is not None:
        try:
            existing = args.append.read_bytes() if args.append.exists() else None
        except OSError as exc:
            print(f"campusguard keys new: error: cannot read {args.append}: {exc.strerror}", file=sys.stderr)
            return 2
        new = existing is None
        existing = existing or b""
        updated = existing + (b"" if not existing or existing.endswith(b"\n") else b"\n") + line.encode() + b"\n"
        try:
            parse_keys_file(updated, args.append)  # a duplicate name or a broken file: nothing is written
        except KeysFileError as exc:
            print(f"campusguard keys new: error: {exc.message}", file=sys.stderr)
            return 2
        try:
            _write_keeping_owner(args.append, updated, new)
        except OSError as exc:
            print(f"campusguard keys new: error: cannot write {args.append}: {exc.strerror}; nothing was changed "
                  "(run it as root or as the file's owner)", file=sys.stderr)
            return 2
    if args.json:
        print(json.dumps({"name": args.name, "role": args.role, "key": key,
                          "sha256": hashlib.sha256(key.encode()).hexdigest(), "line": line}))
        return 0
    _explain(args, line)
    print(key)
    if args.append is None:
        print(line)
    return 0


def _write_keeping_owner(path: Path, data: bytes, new: bool) -> None:
    """A new keys file is 0600 and ours; an existing one keeps its owner and mode (the
    replicas' user must still read it after root appended a line)."""
    if new:
        atomic_write(path, data, mode=0o600)
        return
    st = path.stat()
    atomic_write(path, data, mode=st.st_mode & 0o777, owner=(st.st_uid, st.st_gid))


def _explain(args: argparse.Namespace, line: str) -> None:
    from rich.console import Console

    err = Console(stderr=True, highlight=False, soft_wrap=True)  # the line stays one line to copy
    err.print(f"[bold]New {args.role} key for {args.name}.[/bold] The secret (first line on standard output) is "
              "shown once and stored nowhere: hand it over now.")
    if args.append is not None:
        err.print(f"Added to {args.append}: {line}")
    else:
        err.print("Add the second line to the keys file (CAMPUSGUARD_API_KEYS_FILE); it holds the key's SHA-256 only.")
    err.print("A running server picks the change up within CAMPUSGUARD_API_KEYS_WATCH_S (2 s), or at once on SIGHUP.")


def _check(path: Path) -> int:
    from rich.console import Console
    from rich.table import Table

    try:
        entries = parse_keys_file(path.read_bytes(), path)
    except OSError as exc:
        print(f"campusguard keys check: error: cannot read {path}: {exc.strerror}", file=sys.stderr)
        return 2
    except KeysFileError as exc:
        print(f"campusguard keys check: error: {exc.message}", file=sys.stderr)
        return 2
    table = Table(caption=f"{path}: {len(entries)} key(s), valid")
    table.add_column("name")
    table.add_column("role")
    for entry in entries:
        table.add_row(entry.name, entry.role)
    Console().print(table)
    return 0
