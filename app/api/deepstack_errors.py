"""DeepStack's failure format: ``{"success": false, "error": ..., "code": ...}`` under ``PREFIX``.

Its own module, beside the error handlers (app/api/errors.py) that answer with it for every
path under ``PREFIX``, so they need not import the route (app/api/routes/deepstack.py).
"""

from __future__ import annotations

PREFIX = "/v1/vision/"


def is_deepstack(path: str) -> bool:
    return path.startswith(PREFIX)


def deepstack_error(status: int, message: str) -> tuple[int, dict]:
    """(status, body) of a failure on a DeepStack route: what Blue Iris, Home Assistant and
    Frigate read, and DeepStack answers every bad input (image or parameter) with 400."""
    status = 400 if status in (415, 422) else status
    return status, {"success": False, "error": message, "code": status}
