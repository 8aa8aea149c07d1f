"""The nice value of each thread of this process, from /proc (Linux): a runtime's thread pool
inherits the nice value of the thread that creates it, so tests check what serves after a swap."""

from __future__ import annotations

from pathlib import Path


def thread_nice() -> dict[int, tuple[str, int]]:
    """Thread id -> (its name, its nice value) for every thread of this process."""
    out: dict[int, tuple[str, int]] = {}
    for task in Path("/proc/self/task").iterdir():
        try:
            stat = (task / "stat").read_text()
            name = (task / "comm").read_text().strip()
        except OSError:  # the thread ended meanwhile
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) ": state is field 3
        out[int(task.name)] = (name, int(fields[16]))  # field 19 of proc(5): nice
    return out
