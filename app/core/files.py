"""Writing a file so that readers see the old version or the new one, never half of it.

Every file the service writes for others to read (event snapshots and clips, the site file
after a zone edit) goes through ``atomic_write``: a temporary file in the same folder, then
``os.replace``. ``temp_path`` names that temporary for writers that stream into it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from functools import lru_cache
from pathlib import Path


def temp_path(path: Path) -> Path:
    """The hidden temporary beside ``path`` (same filesystem, so the rename is atomic)."""
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def atomic_write(path: Path, data: bytes, mode: int | None = None, owner: tuple[int, int] | None = None) -> None:
    """Write ``data`` to ``path`` atomically (``mode``: the file's permissions, else the umask's).

    ``owner`` (uid, gid): the new file's owner, e.g. the replaced file's, so that a file root
    rewrites for a service user stays that user's; PermissionError (nothing written) when this
    process may not give it away.
    """
    tmp = temp_path(path)
    try:
        tmp.write_bytes(data)
        if owner is not None and owner != (os.stat(tmp).st_uid, os.stat(tmp).st_gid):
            os.chown(tmp, *owner)
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise


@lru_cache(maxsize=64)
def _sha256(path: Path, size: int, mtime_ns: int) -> str:
    sha = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            sha.update(block)
    return sha.hexdigest()


def file_sha256(path: Path) -> str | None:
    """The file's SHA-256 in hex, read once per file version (its size and mtime are the key:
    weights files are read whole); None when it cannot be read."""
    try:
        stat = path.stat()
        return _sha256(path, stat.st_size, stat.st_mtime_ns)
    except OSError:
        return None
