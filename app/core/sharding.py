"""Which of N parts a camera belongs to: one stable hash for every split by camera.

Gateways split the site's cameras with it (``--shard i/n``), and the rules split cameras over
their worker processes with it (live and replay alike). It must give the same answer in
every process, run and release, so it is a cryptographic digest, never Python's ``hash``
(salted per process).
"""

from __future__ import annotations

import hashlib


def shard_of(camera_id: str, shards: int) -> int:
    """The part (0 <= part < ``shards``) that ``camera_id`` belongs to."""
    digest = hashlib.sha256(camera_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % shards
