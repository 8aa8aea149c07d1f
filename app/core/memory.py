"""Keep the process heap flat over months of mixed-size frames (glibc only).

Camera frames range from thumbnails to 4K; each request allocates and frees buffers of
megabytes from several threads. With glibc's defaults every thread gets its own arena and
the mmap threshold adapts upwards, so freed 4K frames stay in fragmented arenas and RSS
creeps. Two arenas and a fixed 1 MiB mmap threshold (large buffers are mmapped and
returned to the OS on free) keep RSS flat in the soak test. Variables MALLOC_ARENA_MAX /
MALLOC_MMAP_THRESHOLD_ in the environment take precedence.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os

log = logging.getLogger("campusguard.memory")
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8
ARENA_MAX = 2
MMAP_THRESHOLD = 1 << 20


def _libc():
    name = ctypes.util.find_library("c")
    if not name:
        return None
    try:
        libc = ctypes.CDLL(name)
    except OSError:
        return None
    return libc if hasattr(libc, "mallopt") else None


def tune_allocator() -> bool:
    """Apply the settings above; call once at startup, before worker threads exist."""
    libc = _libc()
    if libc is None:
        return False
    ok = True
    if "MALLOC_ARENA_MAX" not in os.environ:
        ok &= bool(libc.mallopt(M_ARENA_MAX, ARENA_MAX))
    if "MALLOC_MMAP_THRESHOLD_" not in os.environ:
        ok &= bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD))
    return ok


def trim_heap() -> None:
    """Return freed heap pages to the OS; the CPU analogue of ``empty_cache()``."""
    libc = _libc()
    if libc is not None and hasattr(libc, "malloc_trim"):
        libc.malloc_trim(0)
