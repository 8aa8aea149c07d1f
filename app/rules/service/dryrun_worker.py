"""The dry runs' own process: ``python -m app.rules.service.dryrun_worker CPU_S IDLE_S [normal]``
(started and fed by app/rules/service/dryrun.py).

Before it imports anything heavy it lowers itself: the idle scheduling class (SCHED_IDLE: it
runs only on CPU time nothing else wants) and nice 19. Parsing a large site file and replaying
a day of frames therefore never takes CPU or the interpreter lock from the detection path.

It serves one dry run at a time, each a length-prefixed JSON request on stdin answered by a
length-prefixed JSON reply on stdout (``{"ok": <comparison>}`` or ``{"error": {status, code,
message, detail, retry_after}}``). Before each it sets its CPU-time limit to what it has
used plus ``CPU_S`` (RLIMIT_CPU: the kernel ends it with SIGXCPU past that), so no dry run
runs for ever. Staying up between dry runs spares the next one the imports (the tracker's
among them); it exits after ``IDLE_S`` seconds without one, or when stdin closes (the server
is gone).
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import resource
import select
import struct
import sys
from typing import Any, BinaryIO

HEADER = struct.Struct(">Q")  # the byte length of the JSON that follows


def lower_priority(idle: bool = True) -> None:
    """Idle scheduling class and nice 19, each where the system allows."""
    if not idle:
        return
    try:
        os.nice(19)
    except OSError:
        pass
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):  # not Linux, or refused: nice 19 still applies
        pass


def limit_cpu(cpu_s: float) -> None:
    """The kernel stops this process once the next dry run has used ``cpu_s`` seconds of CPU."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    used = usage.ru_utime + usage.ru_stime
    resource.setrlimit(resource.RLIMIT_CPU, (math.ceil(used + max(cpu_s, 1.0)), resource.RLIM_INFINITY))


def read_frame(stream: BinaryIO) -> bytes | None:
    head = stream.read(HEADER.size)
    if len(head) < HEADER.size:
        return None
    return stream.read(HEADER.unpack(head)[0])


def write_frame(stream: BinaryIO, payload: bytes) -> None:
    stream.write(HEADER.pack(len(payload)) + payload)
    stream.flush()


def run(request: dict[str, Any]) -> dict[str, Any]:
    from app.core.errors import ServiceError
    from app.rules.service.replay import compare
    from app.rules.site.loader import parse_site_text
    from app.rules.store.db import EventStore
    from app.rules.store.errors import StoreUnavailable, describe, is_outage

    try:
        site = parse_site_text(request["text"], request["source"], as_json=request["as_json"])
        store = EventStore(request["db_url"], migrate=False)
        try:
            comparison = compare(store, site, dt.datetime.fromisoformat(request["since"]),
                                 dt.datetime.fromisoformat(request["until"]))
        except Exception as exc:
            if is_outage(exc):
                raise StoreUnavailable(f"event store unreachable: {describe(exc)}") from None
            raise
        finally:
            store.close()
        return {"ok": comparison.to_dict()}
    except ServiceError as exc:
        return {"error": {"status": exc.status, "code": exc.code, "message": exc.message, "detail": exc.detail,
                          "retry_after": exc.retry_after}}


def main() -> int:
    cpu_s, idle_s = float(sys.argv[1]), float(sys.argv[2])
    lower_priority(idle=sys.argv[3:4] != ["normal"])
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    while True:
        if not select.select([stdin], [], [], idle_s)[0]:
            return 0  # idle: give the memory back; the next dry run starts a new worker
        request = read_frame(stdin)
        if request is None:
            return 0  # the server closed the pipe
        limit_cpu(cpu_s)
        reply = run(json.loads(request))
        write_frame(stdout, json.dumps(reply).encode())  # ASCII: a lone surrogate in a message cannot break it


if __name__ == "__main__":
    sys.exit(main())
