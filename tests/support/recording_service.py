"""A small real HTTP server standing in for the detection service in gateway tests: it
records every frame POSTed to /detect and every source-state report, and answers either
200 or (``busy``) 503 with ``Retry-After`` after a short delay, tracking how many
requests per camera were open at once (a pile-up shows as more than one)."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit


@dataclass
class Post:
    camera_id: str
    timestamp: str
    api_key: str | None
    content_type: str | None
    body: bytes
    received_at: float


@dataclass
class RecordingService:
    busy: bool = False
    retry_after_s: int = 2
    busy_delay_s: float = 0.3
    posts: list[Post] = field(default_factory=list)
    reports: list[tuple[str, str, dict | None]] = field(default_factory=list)  # (method, camera, body)
    open_now: dict[str, int] = field(default_factory=dict)
    open_max: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> "RecordingService":
        service = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                parts = urlsplit(self.path)
                query = {k: v[0] for k, v in parse_qs(parts.query).items()}
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                camera = query.get("camera_id", "")
                service._enter(camera)
                try:
                    with service.lock:
                        service.posts.append(Post(camera, query.get("timestamp", ""), self.headers.get("X-API-Key"),
                                                  self.headers.get("Content-Type"), body, time.monotonic()))
                    if service.busy:
                        time.sleep(service.busy_delay_s)
                        self._answer(503, {"error": "queue_full", "message": "busy"},
                                     {"Retry-After": str(service.retry_after_s)})
                    else:
                        self._answer(200, {"detections": []})
                finally:
                    service._leave(camera)

            def do_PUT(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                self._report("PUT", body)

            def do_DELETE(self) -> None:
                self._report("DELETE", None)

            def _report(self, method: str, body: dict | None) -> None:
                segments = urlsplit(self.path).path.split("/")  # /cameras/{id}/source
                with service.lock:
                    service.reports.append((method, unquote(segments[2]), body))
                self._answer(204, None)

            def _answer(self, status: int, body: dict | None, headers: dict[str, str] | None = None) -> None:
                data = json.dumps(body).encode() if body is not None else b""
                self.send_response(status)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                if data:
                    self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def _enter(self, camera: str) -> None:
        with self.lock:
            self.open_now[camera] = self.open_now.get(camera, 0) + 1
            self.open_max[camera] = max(self.open_max.get(camera, 0), self.open_now[camera])

    def _leave(self, camera: str) -> None:
        with self.lock:
            self.open_now[camera] -= 1

    def posts_for(self, camera: str) -> list[Post]:
        with self.lock:
            return [p for p in self.posts if p.camera_id == camera]

    def last_report(self, camera: str) -> tuple[str, dict | None] | None:
        with self.lock:
            found = [(m, b) for m, c, b in self.reports if c == camera]
        return found[-1] if found else None

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
