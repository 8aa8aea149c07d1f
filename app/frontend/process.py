"""A front-end process: uvicorn on the socket its parent bound, serving ``Proxy``.

Started by the owner (app/wiring/frontends.py) as ``python -m app.frontend OPTIONS_JSON``
with the listening socket inherited at ``fd``; it takes no settings of its own (what it
needs comes in the options), so it never loads the model stack. It leaves when its parent
does (checked every second), ignores SIGHUP (the owner reloads the files) and drains its
open requests on SIGTERM, as uvicorn does.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
import threading
from dataclasses import dataclass

import uvicorn

from app.core.logs import configure_logging
from app.frontend.proxy import Proxy


@dataclass(frozen=True, slots=True)
class FrontendOptions:
    fd: int  # the public listening socket, inherited
    owner: str  # the owner's Unix socket
    index: int
    graceful_s: float = 30.0
    log_format: str = "text"
    log_level: str = "INFO"

    def dumps(self) -> str:
        return json.dumps({k: getattr(self, k) for k in self.__dataclass_fields__})


def main(argv: list[str] | None = None) -> int:
    options = FrontendOptions(**json.loads((argv or sys.argv[1:])[0]))
    configure_logging(options.log_format, options.log_level)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    sock = socket.socket(fileno=options.fd)  # family and type read from the descriptor
    config = uvicorn.Config(Proxy(options.owner, options.index), log_config=None, access_log=False,
                            timeout_graceful_shutdown=options.graceful_s,  # type: ignore[arg-type]
                            lifespan="on", proxy_headers=False)  # the owner checks X-Forwarded-For
    server = uvicorn.Server(config)
    parent = os.getppid()
    threading.Thread(target=_leave_with_parent, args=(server, parent), name="campusguard-fe-parent",
                     daemon=True).start()
    with asyncio.Runner(loop_factory=config.get_loop_factory()) as runner:
        runner.run(server.serve(sockets=[sock]))
    return 0


def _leave_with_parent(server: uvicorn.Server, parent: int) -> None:
    """An orphaned front end would keep accepting frames no owner answers: it stops instead."""
    while not server.should_exit:
        if os.getppid() != parent:
            server.should_exit = True
            return
        threading.Event().wait(1.0)
