"""A TCP relay in front of a real server that can hold what clients send and cut connections.

``hold()`` keeps forwarding the server's bytes but swallows the client's, so the server never
sees (or acknowledges) what the client sends meanwhile; ``cut()`` closes every open
connection (the client sees the server go away) and forwards the connections that follow
normally again.
"""

from __future__ import annotations

import socket
import threading


class TcpProxy:
    def __init__(self, port: int, host: str = "127.0.0.1") -> None:
        self.target = (host, port)
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self._lock = threading.Lock()
        self._open: list[socket.socket] = []
        self._holding = False
        self.held_bytes = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def hold(self) -> None:
        with self._lock:
            self._holding, self.held_bytes = True, 0

    def cut(self) -> None:
        """Close every connection open now; the next ones are forwarded in full."""
        with self._lock:
            sockets, self._open, self._holding = self._open, [], False
        for s in sockets:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self) -> None:
        try:
            self._server.shutdown(socket.SHUT_RDWR)  # wakes the accept thread (close alone does not)
        except OSError:
            pass
        self._server.close()
        self.cut()

    def _accept(self) -> None:
        while True:  # accept() on the shut-down socket raises: the thread ends
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target)
            except OSError:
                client.close()  # the server is gone: so is this connection
                continue
            with self._lock:
                self._open += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, from_client: bool) -> None:
        try:
            while data := src.recv(65536):
                with self._lock:
                    if from_client and self._holding:
                        self.held_bytes += len(data)
                        continue
                dst.sendall(data)
        except OSError:
            pass
