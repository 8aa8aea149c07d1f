"""Replicas behind the load balancer and a keyed POST, shared by the load-balancer and router tests."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import httpx


class Replica:
    """A stand-in detector: answers JSON naming itself, or 503 when told to; lets every edge
    check (GET /auth/check) pass without counting it."""

    def __init__(self, index: int, host: str = "127.0.0.1", port: int = 0) -> None:
        self.index = index
        self.status = 200
        self.hits = 0
        replica = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _answer(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else b""
                if self.path.startswith("/auth/check"):
                    self.send_response(204)
                    self.end_headers()
                    return
                replica.hits += 1
                query = parse_qs(urlparse(self.path).query)
                payload = json.dumps({"replica": replica.index, "body_len": len(body),
                                      "camera_id": query.get("camera_id", [None])[0]}).encode()
                self.send_response(replica.status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = _answer

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


# Clients send a key, as every camera gateway does: the keyed zone's budget (the stand-ins let
# any key pass), not the anonymous one's, which these bursts would exceed.
KEYED = {"X-API-Key": "stand-in-key"}


def post(client: httpx.Client, camera: str | None, body: bytes = b"jpeg") -> httpx.Response:
    params = {"camera_id": camera} if camera else {}
    return client.post("/detect", params=params, content=body, headers={"content-type": "image/jpeg"})
