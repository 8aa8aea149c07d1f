"""API-key roles and what each may do: the one table of who can call what.

``CAMPUSGUARD_API_KEYS`` is a comma list of ``[role:]key`` entries. Routes declare the
*permission* they need (``app.api.deps.require``); this module maps roles to permissions,
so a new role or a stricter route is one line here or there, never a list of keys per route.

A bare key (no known role prefix) is ``admin``: before roles existed every key could do
everything, and an upgrade must not lock anybody out. Only a known role name followed by
``:`` is a prefix, so keys that contain ``:`` keep working.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from app.core.errors import Forbidden, InsufficientRole, Unauthorized

Permission = Literal["read", "review", "detect", "admin"]
Role = Literal["viewer", "operator", "camera", "admin"]
PERMISSIONS: tuple[Permission, ...] = ("read", "review", "detect", "admin")
ROLE_PERMISSIONS: dict[str, frozenset[str]] = {
    "viewer": frozenset({"read"}),                       # the console and every GET
    "operator": frozenset({"read", "review"}),           # + acknowledge / false positive
    "camera": frozenset({"detect"}),                     # a camera gateway: sends frames, reads nothing
    "admin": frozenset(PERMISSIONS),                     # + zone edits, reload, resets
}
ROLES: tuple[str, ...] = tuple(ROLE_PERMISSIONS)
DEFAULT_ROLE = "admin"
ACTIONS: dict[str, str] = {  # "role viewer may not <action> (needs admin)"
    "read": "read events, cameras, site and status",
    "review": "review events",
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


@dataclass(frozen=True, slots=True)
class Keyring:
    """The configured keys with their roles. Empty: auth is off and every caller is admin."""

    keys: tuple[tuple[str, bytes], ...] = ()

    @classmethod
    def parse(cls, entries: Iterable[str]) -> "Keyring":
        return cls(tuple((role, key.encode()) for role, key in map(parse_key, entries)))

    @property
    def enabled(self) -> bool:
        return bool(self.keys)

    def role_of(self, supplied: str | None) -> str:
        """The caller's role: 401 without a key, 403 for an unknown one (constant time over
        every key, so timing reveals neither which key matched nor its role)."""
        if not self.keys:
            return DEFAULT_ROLE
        if not supplied:
            raise Unauthorized("an API key is required (X-API-Key header)")
        candidate = supplied.encode()
        found: str | None = None
        for role, key in self.keys:  # no early exit
            if hmac.compare_digest(candidate, key) and found is None:
                found = role
        if found is None:
            raise Forbidden("the API key is not valid")
        return found

    def authorize(self, supplied: str | None, permission: str) -> str:
        """The caller's role if it holds ``permission``; 401 / 403 / 403 ``insufficient_role``."""
        role = self.role_of(supplied)
        if permission not in ROLE_PERMISSIONS[role]:
            raise InsufficientRole(f"role {role} may not {ACTIONS[permission]} (needs {needed_role(permission)})")
        return role

    def counts(self) -> dict[str, int]:
        """Keys per role (startup log)."""
        out: dict[str, int] = {}
        for role, _ in self.keys:
            out[role] = out.get(role, 0) + 1
        return out
