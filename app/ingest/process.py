"""Child processes that never outlive us.

Each ffmpeg runs in its own process group (a terminal's Ctrl-C or a signal to our group
does not reach it half-way; ``kill`` takes the whole group) and with
``PR_SET_PDEATHSIG=SIGKILL``, so the kernel kills it if we die without cleaning up (even
by SIGKILL). Linux ties that signal to the *thread* that forked the child, so a reader is
spawned from the camera's own thread, which lives until its child is reaped.

``kill`` is the one way a child ends: SIGTERM to the group, SIGKILL after a short grace,
then ``wait`` (no zombies). ``live_children`` lets a test or an atexit hook check.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import signal
import subprocess
import threading

PR_SET_PDEATHSIG = 1

_libc = ctypes.CDLL(None, use_errno=True)
_prctl = _libc.prctl
_prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
_prctl.restype = ctypes.c_int

_children: set[subprocess.Popen] = set()
_children_lock = threading.Lock()


def _die_with_parent(parent_pid: int) -> None:
    """Runs in the child between fork and exec: ask for SIGKILL when the parent (thread) dies,
    and exit at once if it already has (the race the man page warns about)."""
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:
        os._exit(1)


def spawn(argv: list[str]) -> subprocess.Popen:
    """Start ``argv`` with stdout and stderr as pipes, stdin closed, in its own process group."""
    parent = os.getpid()
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            bufsize=0, start_new_session=True, close_fds=True,
                            preexec_fn=lambda: _die_with_parent(parent))
    with _children_lock:
        _children.add(proc)
    return proc


def kill(proc: subprocess.Popen, grace_s: float = 1.0) -> int:
    """End ``proc`` and its process group, reap it, close its pipes; returns its exit status."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    # (once the leader is reaped its pid may be reused: the group is never signalled then)
    for pipe in (proc.stdout, proc.stderr):
        if pipe is not None:
            with contextlib.suppress(OSError):
                pipe.close()
    with _children_lock:
        _children.discard(proc)
    return proc.returncode


def live_children() -> list[int]:
    """Pids of children spawned here and not yet killed."""
    with _children_lock:
        return [p.pid for p in _children if p.poll() is None]


@atexit.register
def _kill_all() -> None:
    """Last line of defence on a normal interpreter exit (a missed stop())."""
    with _children_lock:
        procs = list(_children)
    for proc in procs:
        kill(proc, grace_s=0.2)
