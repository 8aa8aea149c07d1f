"""Pull the site file's camera streams and POST their frames to the service (multi-replica sites).

The gateway itself is app/ingest/gateway.py (options, run loop, signals); this module is its
place in the command table. docs/cameras.md, "The gateway".
"""

from __future__ import annotations

from app.ingest.gateway import configure, run

__all__ = ["configure", "run"]
