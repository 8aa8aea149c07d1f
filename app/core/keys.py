"""Named API keys from a YAML file, re-read when it changes: rotation without a restart.

``CAMPUSGUARD_API_KEYS_FILE`` names a YAML list, one entry per key::

    - {name: alice, role: admin, sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08}
    - {name: gate-gateway, role: camera, key: a-long-random-secret-of-16-or-more-characters, cameras: ["gate-*"]}

``sha256`` (what ``campusguard keys new`` prints) lets the server check a key without ever
holding it; ``key`` is accepted for files that are secrets themselves (a Kubernetes Secret).
The ``name`` is what logs, event reviews and the audit trail show: never the key.
``cameras`` (optional, fnmatch-style patterns of camera ids) are the cameras a key may
report streams for and, with ``CAMPUSGUARD_BIND_FRAMES_TO_KEY_CAMERAS``, send frames for;
without it a key may use every camera.

Rotation: give the new key to its holder, add its line, wait until nobody uses the old one
(the access log shows names), remove the old line. The file is checked every ``watch_s``
(and read at once on SIGHUP): a changed file is validated as a whole and swapped in one
step once it has held still for one check, so both keys work meanwhile and a removed key
stops working within seconds. A file that is invalid, unreadable, empty (in the watcher) or
not a regular file is refused, logged once, and the running keys stay.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from app.core.background import Periodic
from app.core.errors import ConfigError
from app.core.roles import ANONYMOUS, EVERY_CAMERA, ROLES, KeyEntry, Keyring
from app.core.smallfile import FileIdentity, FileRefused, file_identity, read_regular

log = logging.getLogger("campusguard.keys")
MAX_FILE_BYTES = 1024 * 1024
MIN_KEY_LENGTH = 16  # a file key is typed by nobody: no reason for a short one
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@+ -]{0,63}")
RESERVED_NAMES = frozenset({ANONYMOUS, "system"})
HEX64 = re.compile(r"[0-9a-fA-F]{64}")
FIELDS = frozenset({"name", "role", "key", "sha256", "cameras"})
CAMERA_PATTERN = re.compile(r"[A-Za-z0-9_.:*?\[\]!-]{1,64}")
MAX_CAMERA_PATTERNS = 256


class KeysFileError(ConfigError):
    """The keys file is unreadable or invalid (the message lists every problem, never a key)."""

    code = "keys_file_error"


def parse_keys_file(data: bytes, path: Path | str = "keys file") -> tuple[KeyEntry, ...]:
    """The entries of a keys file's content; KeysFileError listing every problem at once.

    Messages name entries by position and name only: a key never appears in an error, so
    never in a log line."""
    if len(data) > MAX_FILE_BYTES:
        raise KeysFileError(f"{path}: larger than {MAX_FILE_BYTES} bytes")
    try:
        doc = yaml.safe_load(data.decode("utf-8")) if data.strip() else []
    except UnicodeDecodeError:
        raise KeysFileError(f"{path}: not UTF-8 text") from None
    except yaml.YAMLError as exc:  # the mark only: PyYAML's own message quotes the line, which may hold a key
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or "syntax error"
        raise KeysFileError(f"{path}: not valid YAML ({where}{problem})") from None
    if doc is None:
        doc = []
    if not isinstance(doc, list):
        raise KeysFileError(f"{path}: must be a YAML list of {{name, role, key | sha256}} entries")
    problems: list[str] = []
    entries: list[KeyEntry] = []
    names: set[str] = set()
    digests: dict[bytes, str] = {}
    for i, item in enumerate(doc, 1):
        entry = _entry(item, i, problems)
        if entry is None:
            continue
        if entry.name in names:
            problems.append(f"entry {i}: name {entry.name!r} is used twice")
        elif entry.digest in digests:
            problems.append(f"entry {i} ({entry.name}): the same key as {digests[entry.digest]!r}")
        else:
            names.add(entry.name)
            digests[entry.digest] = entry.name
            entries.append(entry)
    if problems:
        raise KeysFileError(f"{path}: " + "; ".join(problems))
    return tuple(entries)


def _entry(item: Any, i: int, problems: list[str]) -> KeyEntry | None:
    if not isinstance(item, dict):
        problems.append(f"entry {i}: must be a mapping {{name, role, key | sha256}}")
        return None
    before = len(problems)
    unknown = sorted(str(k)[:32] for k in item if k not in FIELDS)
    name = item.get("name")
    label = f"entry {i}" + (f" ({name})" if isinstance(name, str) and NAME.fullmatch(name) else "")
    if unknown:
        problems.append(f"{label}: unknown field(s) {', '.join(unknown)} (allowed: name, role, key, sha256, cameras)")
    if not isinstance(name, str) or not NAME.fullmatch(name):
        problems.append(f"{label}: name must be 1-64 characters: letters, digits, space and _ . @ + - "
                        "(a letter or digit first)")
    elif name in RESERVED_NAMES:
        problems.append(f"{label}: the name {name!r} is reserved")
    role = item.get("role")
    if role not in ROLES:
        problems.append(f"{label}: role must be one of {', '.join(ROLES)}")
    key, sha = item.get("key"), item.get("sha256")
    if (key is None) == (sha is None):
        problems.append(f"{label}: give exactly one of key or sha256")
    elif key is not None and (not isinstance(key, str) or len(key) < MIN_KEY_LENGTH):
        problems.append(f"{label}: key must be a string of at least {MIN_KEY_LENGTH} characters")
    elif sha is not None and (not isinstance(sha, str) or not HEX64.fullmatch(sha)):
        problems.append(f"{label}: sha256 must be 64 hex digits (campusguard keys new prints it)")
    cameras = item.get("cameras", EVERY_CAMERA)
    if not isinstance(cameras, (list, tuple)) or not 0 < len(cameras) <= MAX_CAMERA_PATTERNS or not all(
            isinstance(c, str) and CAMERA_PATTERN.fullmatch(c) for c in cameras):
        problems.append(f"{label}: cameras must be a list of 1-{MAX_CAMERA_PATTERNS} camera ids or patterns "
                        "(fnmatch: * ? [..]; 1-64 characters of A-Z a-z 0-9 _ . : -)")
    if len(problems) > before:
        return None
    assert isinstance(name, str) and isinstance(role, str)  # no new problem: both were checked above
    value = hashlib.sha256(key.encode()).digest() if key is not None else bytes.fromhex(str(sha))
    return KeyEntry(name, role, value, tuple(cameras))


def new_key(role: str, name: str) -> tuple[str, str]:
    """A fresh random key and the keys-file line that accepts it (its SHA-256, not the key)."""
    if role not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)}")
    if not NAME.fullmatch(name) or name in RESERVED_NAMES:
        raise ValueError("name must be 1-64 characters: letters, digits, space and _ . @ + - (a letter or digit first)")
    key = "cg_" + secrets.token_urlsafe(32)
    line = f"- {{name: {json.dumps(name)}, role: {role}, sha256: {hashlib.sha256(key.encode()).hexdigest()}}}"
    return key, line


@dataclass(frozen=True, slots=True)
class KeyChange:
    """A keys-file reload that changed something: who could use the service before and after
    (names and roles, never keys), and what triggered it (file_changed, signal)."""

    path: str
    trigger: str
    before: tuple[tuple[str, str], ...]
    after: tuple[tuple[str, str], ...]

    def describe(self) -> str:
        added = [n for n, _ in self.after if n not in dict(self.before)]
        removed = [n for n, _ in self.before if n not in dict(self.after)]
        changed = [n for n, r in self.after if dict(self.before).get(n, r) != r]
        parts = [f"added {', '.join(added)}" if added else "", f"removed {', '.join(removed)}" if removed else "",
                 f"role changed for {', '.join(changed)}" if changed else ""]
        return "; ".join(p for p in parts if p) or "same names and roles (a key may have been replaced)"


class KeySource:
    """The current keyring: the keys of ``CAMPUSGUARD_API_KEYS`` (fixed) plus those of the keys
    file (re-read when it changes). ``keyring`` is swapped in one assignment, so a request
    sees the old set or the new one, never half of it."""

    def __init__(self, env: Keyring, path: Path | None = None, *, watch_s: float = 2.0,
                 on_change: Callable[[KeyChange], None] | None = None,
                 on_outcome: Callable[[str, str], None] | None = None) -> None:
        self.env = env
        self.path = Path(path) if path is not None else None
        self.on_change = on_change or (lambda change: None)
        self.on_outcome = on_outcome or (lambda trigger, outcome: None)
        self._file: tuple[KeyEntry, ...] = ()
        self._loaded = ""  # SHA-256 of the content in force
        self._refused = ""  # of a content refused (not retried until the file changes again)
        self._refused_identity: FileIdentity | None = None  # of a file refused: not even read again until it changes
        self._pending = ""  # a changed content seen once: applied when the next check sees it unchanged
        self._lock = threading.Lock()
        self.keyring = Keyring(env.entries, required=env.required or self.path is not None)
        if self.path is not None:
            self._file, self._loaded = self._read()
            self._swap()
        self.watcher = Periodic("keys-file-watch", self.check, watch_s if self.path is not None else 0,
                                on_error=lambda exc: log.exception("keys file check failed", exc_info=exc))

    @classmethod
    def fixed(cls, keyring: Keyring) -> KeySource:
        """A source without a file (tests, and servers with CAMPUSGUARD_API_KEYS only)."""
        return cls(keyring)

    def start(self) -> None:
        self.watcher.start()  # no file, or watch_s 0: nothing to watch (SIGHUP still reloads)

    def stop(self) -> None:
        self.watcher.stop()

    @property
    def names(self) -> tuple[tuple[str, str], ...]:
        return tuple((e.name, e.role) for e in self._file)

    def check(self) -> bool:
        """Reload when the file's content changed (the watcher, every ``watch_s``); whether it did.

        An editor or ``cp`` writes a file in steps, and a half-written keys file (empty, or a
        YAML list cut after some entries) is often valid: applied, it would refuse keys that
        are in both the old and the new file, and the throttle would count those as wrong
        keys. So a changed file is applied only once it has held still for one check (as the
        site-file watcher does), and an empty read is refused here (``[]`` removes every
        key on purpose; SIGHUP still applies an empty file). A refused file is remembered by
        its identity (device, inode, size, mtime) and not read again until it changes."""
        if self.path is None:
            return False
        seen, data = self._peek()
        if seen in (self._loaded, self._refused):
            self._pending = ""
            return False
        if seen != self._pending:  # changed since the last check: wait one check for it to hold still
            self._pending = seen
            return False
        self._pending = ""
        if data is not None and not data.strip():
            self._refuse_empty()
            return False
        try:
            self.reload("file_changed", data)
        except KeysFileError as exc:
            log.error("keys file changed but was refused; the running keys stay in force: %s", exc.message)
            return False
        return True

    def _peek(self) -> tuple[str, bytes | None]:
        """What the file holds now, as the digest of its content (or a marker when it cannot
        be read) and the content; a file with a refused identity is not read again."""
        assert self.path is not None
        try:
            if file_identity(self.path) == self._refused_identity:
                return self._refused, None
            data, _ = read_regular(self.path, MAX_FILE_BYTES)
        except FileRefused as exc:
            return f"refused:{exc.identity}", None
        except OSError:
            return "unreadable", None
        return hashlib.sha256(data).hexdigest(), data

    def _refuse_empty(self) -> None:
        assert self.path is not None
        with self._lock:
            self._refused = hashlib.sha256(b"").hexdigest()
            try:
                self._refused_identity = file_identity(self.path)
            except OSError:
                self._refused_identity = None
        self.on_outcome("file_changed", "refused")
        log.error("keys file %s is empty: refused, the running keys stay in force (a file being written? to remove "
                  "every key on purpose write [] into it)", self.path)

    def reload_or_log(self, trigger: str = "signal") -> bool:
        """``reload`` for signal handlers: log instead of raising."""
        try:
            self.reload(trigger)
        except KeysFileError as exc:
            log.error("keys file reload refused; the running keys stay in force: %s", exc.message)
            return False
        return True

    def reload(self, trigger: str = "signal", data: bytes | None = None) -> KeyChange | None:
        """Read (or take ``data``, what the watcher just read) and validate the whole file, then
        swap it in; KeysFileError keeps the running keys."""
        if self.path is None:
            return None
        with self._lock:
            before = self.names
            try:
                self._file, self._loaded = self._read(data)
            except KeysFileError:
                self.on_outcome(trigger, "refused")
                raise
            self._refused, self._refused_identity = "", None
            self._swap()
            change = KeyChange(str(self.path), trigger, before, self.names)
        self.on_outcome(trigger, "ok")
        log.info("keys file %s reloaded (%s): %s; %d named key(s)", self.path, trigger, change.describe(),
                 len(change.after))
        self.on_change(change)
        return change

    def _read(self, data: bytes | None = None) -> tuple[tuple[KeyEntry, ...], str]:
        assert self.path is not None
        what = "CAMPUSGUARD_API_KEYS_FILE"
        if data is None:
            try:  # a regular file of at most MAX_FILE_BYTES only: /dev/zero, a FIFO stop here (app/core/smallfile.py)
                data, _ = read_regular(self.path, MAX_FILE_BYTES)
            except FileRefused as exc:
                self._refused, self._refused_identity = f"refused:{exc.identity}", exc.identity
                raise KeysFileError(f"{what}: {self.path} {exc.reason}") from None
            except OSError as exc:
                self._refused = "unreadable"
                raise KeysFileError(f"{what}: cannot read {self.path}: "
                                    f"{exc.strerror or exc.__class__.__name__}") from None
        seen = hashlib.sha256(data).hexdigest()
        try:
            entries = parse_keys_file(data, self.path)
        except KeysFileError:
            self._refused = seen
            try:
                self._refused_identity = file_identity(self.path)
            except OSError:
                self._refused_identity = None
            raise
        return entries, seen

    def _swap(self) -> None:
        self.keyring = Keyring(self.env.entries + self._file, required=True)
