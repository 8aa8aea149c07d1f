"""API-key roles and what each may do: the one table of who can call what, and the keyring.

Keys come from ``CAMPUSGUARD_API_KEYS`` (a comma list of ``[role:]key`` entries, shown as
``key:<8 hex>``) and from the named keys file (app/core/keys.py: ``{name, role, key}`` or
``{name, role, sha256}``). Routes declare the *permission* they need
(``app.api.deps.require``); this module maps roles to permissions, so a new role or a
stricter route is one line here or there, never a list of keys per route.

A bare key (no known role prefix) is ``admin``: before roles existed every key could do
everything, and an upgrade must not lock anybody out. Only a known role name followed by
``:`` is a prefix, so keys that contain ``:`` keep working.

The keyring holds only SHA-256 digests, never a key: a supplied key is hashed once and
compared with every digest in constant time (equal lengths, no early exit), so timing
reveals neither which key matched nor its role, and a memory dump reveals no key.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Literal

from app.core.errors import CameraNotAllowed, Forbidden, InsufficientRole, Unauthorized

Permission = Literal["read", "review", "detect", "admin"]
Role = Literal["viewer", "operator", "camera", "admin"]
PERMISSIONS: tuple[Permission, ...] = ("read", "review", "detect", "admin")
ROLE_PERMISSIONS: dict[str, frozenset[str]] = {
    "viewer": frozenset({"read"}),                       # the console and every GET
    "operator": frozenset({"read", "review"}),           # + acknowledge / false positive, accept a camera view
    "camera": frozenset({"detect"}),                     # a camera gateway: sends frames, reads nothing
    "admin": frozenset(PERMISSIONS),                     # + zone edits, reload, resets
}
ROLES: tuple[str, ...] = tuple(ROLE_PERMISSIONS)
DEFAULT_ROLE = "admin"
ANONYMOUS = "anonymous"  # the caller's name when no key is needed (auth off, or a public route)
EVERY_CAMERA: tuple[str, ...] = ("*",)  # a key without ``cameras:`` (and every CAMPUSGUARD_API_KEYS key)
ACTIONS: dict[str, str] = {  # "role viewer may not <action> (needs admin)"
    "read": "read events, cameras, site and status",
    "review": "review events or accept camera views",
    "detect": "send frames for detection",
    "admin": "change the configuration",
}


def needed_role(permission: str) -> str:
    """The least powerful role holding ``permission`` (for error messages)."""
    return min((r for r, p in ROLE_PERMISSIONS.items() if permission in p), key=lambda r: len(ROLE_PERMISSIONS[r]))


def parse_key(entry: str) -> tuple[str, str]:
    """``"viewer:abc"`` -> ``("viewer", "abc")``; ``"abc"`` or ``"x:abc"`` -> ``("admin", entry)``."""
    role, sep, key = entry.partition(":")
    if sep and role.strip().lower() in ROLE_PERMISSIONS:
        key = key.strip()
        if not key:
            raise ValueError(f"api_keys entry {role.strip().lower()}: has an empty key")
        return role.strip().lower(), key
    return DEFAULT_ROLE, entry


INVALID_KEY = "the API key is not valid"  # a front end's compact frame is refused with it too (app/wiring/compact.py)


def digest(key: str) -> bytes:
    """The SHA-256 of a key: what the keyring keeps and what a keys file's ``sha256`` holds."""
    return hashlib.sha256(key.encode()).digest()


def key_id(key: str) -> str:
    """``key:<first 8 hex of its SHA-256>``: how an unnamed key (or a wrong one) appears in logs."""
    return "key:" + hashlib.sha256(key.encode()).hexdigest()[:8]


@dataclass(frozen=True, slots=True)
class KeyEntry:
    """One accepted key: who it is (``name``, shown in logs, reviews and the audit trail), its
    role, and the SHA-256 of the secret."""

    name: str
    role: str
    digest: bytes
    cameras: tuple[str, ...] = EVERY_CAMERA  # fnmatch-style patterns of camera ids (keys file ``cameras:``)


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling, as far as the keys tell; ``cameras``: the camera ids (fnmatch-style
    patterns, case-sensitive) whose streams it may report and, where the operator binds
    frames (``CAMPUSGUARD_BIND_FRAMES_TO_KEY_CAMERAS``), whose frames it may send."""

    name: str
    role: str
    cameras: tuple[str, ...] = EVERY_CAMERA

    def may_use_camera(self, camera_id: str) -> bool:
        return any(fnmatchcase(camera_id, pattern) for pattern in self.cameras)

    def check_camera(self, camera_id: str) -> None:
        """403 ``camera_not_allowed`` unless the key's ``cameras:`` include ``camera_id``."""
        if not self.may_use_camera(camera_id):
            raise CameraNotAllowed(f"key {self.name} may not use camera {camera_id[:64]!r} "
                                   "(its cameras: in the keys file)")


@dataclass(frozen=True, slots=True)
class Keyring:
    """The accepted keys. ``required``: a key is needed (keys are configured, even if a keys
    file lists none right now); otherwise every caller is an anonymous admin."""

    entries: tuple[KeyEntry, ...] = ()
    required: bool = False

    @classmethod
    def parse(cls, entries: Iterable[str]) -> Keyring:
        """From ``CAMPUSGUARD_API_KEYS`` entries (each ``[role:]key``)."""
        parsed = tuple(KeyEntry(key_id(key), role, digest(key)) for role, key in map(parse_key, entries))
        return cls(parsed, required=bool(parsed))

    @property
    def enabled(self) -> bool:
        return self.required

    def identify(self, supplied: str | None) -> Principal:
        """The caller: 401 without a key, 403 for an unknown one (constant time over every key)."""
        if not self.required:
            return Principal(ANONYMOUS, DEFAULT_ROLE)
        if not supplied:
            raise Unauthorized("an API key is required (X-API-Key header)")
        candidate = digest(supplied)
        found: KeyEntry | None = None
        for entry in self.entries:  # no early exit
            if hmac.compare_digest(candidate, entry.digest) and found is None:
                found = entry
        if found is None:
            raise Forbidden(INVALID_KEY)
        return Principal(found.name, found.role, found.cameras)

    def role_of(self, supplied: str | None) -> str:
        return self.identify(supplied).role

    def authorize(self, supplied: str | None, permission: str) -> Principal:
        """The caller if its role holds ``permission``; 401 / 403 / 403 ``insufficient_role``."""
        principal = self.identify(supplied)
        check_permission(principal, permission)
        return principal

    def counts(self) -> dict[str, int]:
        """Keys per role (startup log)."""
        out: dict[str, int] = {}
        for entry in self.entries:
            out[entry.role] = out.get(entry.role, 0) + 1
        return out


def check_permission(principal: Principal, permission: str) -> None:
    """403 ``insufficient_role`` unless the principal's role holds ``permission``."""
    if permission not in ROLE_PERMISSIONS[principal.role]:
        raise InsufficientRole(f"role {principal.role} may not {ACTIONS[permission]} (needs {needed_role(permission)})")
