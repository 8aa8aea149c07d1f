"""Compact, stable JSON: the bytes that are stored, signed and published."""

from __future__ import annotations

import json
from typing import Any


def dumps(obj: Any) -> bytes:
    """Compact, stable JSON (the bytes that are signed)."""
    return json.dumps(obj, separators=(",", ":"), sort_keys=True, ensure_ascii=False).encode()
