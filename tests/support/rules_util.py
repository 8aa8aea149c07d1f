"""Helpers shared by the rules unit tests: synthetic detections, frames and a local webhook receiver."""

from __future__ import annotations

import datetime as dt
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from app.core.types import Detection

REPO = Path(__file__).resolve().parents[2]
EXAMPLE_SITE = REPO / "deploy" / "site.example.yaml"
T0 = dt.datetime(2026, 3, 2, 12, 0, 0, tzinfo=dt.timezone.utc)
W, H = 1000, 1000
NAMES = {0: "person", 2: "car", 3: "motorcycle", 5: "bus", 7: "truck", 16: "dog"}


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def det(name: str, foot_x: float, foot_y: float, w: float = 0.04, h: float = 0.12, conf: float = 0.9) -> Detection:
    """A box (in pixels of a W x H frame) whose foot point is at the normalized (foot_x, foot_y)."""
    cid = next(k for k, v in NAMES.items() if v == name)
    cx, y2 = foot_x * W, foot_y * H
    return Detection(cid, name, conf, cx - w * W / 2, y2 - h * H, cx + w * W / 2, y2)


def people(n: int, y: float = 0.8, x0: float = 0.1, dx: float = 0.08) -> list[Detection]:
    return [det("person", x0 + i * dx, y) for i in range(n)]


class Receiver:
    """A webhook receiver on 127.0.0.1: records every request; can be told to fail."""

    def __init__(self, port: int = 0, fail_first: int = 0, status: int = 200,
                 hold_first: threading.Event | None = None) -> None:
        """``hold_first``: the first request is recorded, then not answered until the event is set."""
        self.requests: list[dict] = []
        self.fail_first = fail_first
        self.status = status
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with outer.lock:
                    outer.requests.append({"headers": {k.lower(): v for k, v in self.headers.items()},
                                           "body": body, "path": self.path})
                    failing = outer.fail_first > 0
                    if failing:
                        outer.fail_first -= 1
                    hold = hold_first if len(outer.requests) == 1 else None
                if hold is not None:
                    hold.wait(60)
                code = 500 if failing else outer.status
                self.send_response(code)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def keys(self) -> list[str]:
        with self.lock:
            return [r["headers"].get("idempotency-key") for r in self.requests]

    def unique_events(self) -> dict[str, dict]:
        """What a de-duplicating receiver keeps: one payload per Idempotency-Key."""
        with self.lock:
            out = {}
            for r in self.requests:
                out.setdefault(r["headers"]["idempotency-key"], json.loads(r["body"]))
            return out


def outbox_rows(store) -> list[dict]:
    """Every webhook outbox row, read straight from the store's tables (test inspection only)."""
    from sqlalchemy import select

    from app.rules.store.schema import outbox_table

    with store.engine.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(select(outbox_table).order_by(outbox_table.c.id))]
