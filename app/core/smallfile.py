"""Reading a small file that someone else names (a secret, the keys file) without trusting it.

A setting may name anything: ``/dev/zero`` (read without end: all memory, then a traceback),
a FIFO (``open`` waits for a writer that never comes: startup hangs silently), a log file of
gigabytes. ``read_regular`` reads only a regular file (symlinks followed: Kubernetes mounts
secrets as links), checks its size *before* reading, opens it non-blocking (a file swapped
for a FIFO between the check and the open cannot hang us either) and reads at most
``limit + 1`` bytes. A refusal is a ``FileRefused`` with the reason and the file's
``identity`` (``st_dev, st_ino, st_size, st_mtime_ns``), so a watcher can remember a refused
file and skip it until it changes, instead of re-reading it every few seconds.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

FileIdentity = tuple[int, int, int, int]  # st_dev, st_ino, st_size, st_mtime_ns


class FileRefused(ValueError):
    """The file is not one to read: ``reason`` says why (no path, no content in it)."""

    def __init__(self, reason: str, identity: FileIdentity | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.identity = identity


def identity_of(st: os.stat_result) -> FileIdentity:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def file_identity(path: str | os.PathLike[str]) -> FileIdentity:
    """The identity of what ``path`` names now (OSError when it cannot be looked at)."""
    return identity_of(os.stat(path))


def _check(st: os.stat_result, limit: int) -> None:
    if not stat.S_ISREG(st.st_mode):
        kind = ("a FIFO" if stat.S_ISFIFO(st.st_mode) else "a device" if stat.S_ISCHR(st.st_mode) or
                stat.S_ISBLK(st.st_mode) else "a directory" if stat.S_ISDIR(st.st_mode) else "a socket or other")
        raise FileRefused(f"is {kind}, not a regular file", identity_of(st))
    if st.st_size > limit:
        raise FileRefused(f"is larger than {limit} bytes ({st.st_size}); is it the right file?", identity_of(st))


def read_regular(path: str | os.PathLike[str], limit: int) -> tuple[bytes, FileIdentity]:
    """The content of the regular file ``path`` (at most ``limit`` bytes) and its identity.

    FileRefused for anything else (a FIFO, a device, a directory, a file over ``limit``);
    OSError when it cannot be opened (missing, no permission)."""
    _check(os.stat(path), limit)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(Path(path), flags)
    try:
        st = os.fstat(fd)
        _check(st, limit)  # what was opened, in case the name was swapped since the stat
        chunks: list[bytes] = []
        left = limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 65536))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > limit:  # grew while we read
        raise FileRefused(f"is larger than {limit} bytes; is it the right file?", identity_of(st))
    return data, identity_of(st)
