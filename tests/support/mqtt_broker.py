"""A throw-away Mosquitto broker for the tests (Debian's ``mosquitto`` package), and a
recording subscriber.

The broker listens on a free loopback port with a temp config (anonymous, no persistence,
so a restart forgets retained messages exactly like a broker that lost its disk); it can be
stopped and started again on the same port to test outages.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion


def find_mosquitto() -> str | None:
    return shutil.which("mosquitto") or next(
        (p for p in ("/usr/sbin/mosquitto", "/usr/bin/mosquitto") if Path(p).is_file()), None)


class Mosquitto:
    def __init__(self, binary: str, port: int, *, tls_user: tuple[str, str] | None = None) -> None:
        """``tls_user``: a TLS listener (a throw-away CA, ``ca_file``) that admits only this
        (user, password) instead of a plain anonymous one."""
        self.binary, self.port = binary, port
        self.root = Path(tempfile.mkdtemp(prefix="campusguard-mqtt-"))
        self.root.chmod(0o755)  # mosquitto started as root reads its files as user mosquitto
        self.conf = self.root / "mosquitto.conf"
        conf = f"listener {port} 127.0.0.1\npersistence false\nlog_dest stderr\nlog_type error\nlog_type warning\n"
        if tls_user is None:
            conf += "allow_anonymous true\n"
        else:
            self._make_certs()
            passwords = self.root / "passwd"
            subprocess.run(["mosquitto_passwd", "-b", "-c", str(passwords), *tls_user], check=True, capture_output=True)
            passwords.chmod(0o644)
            conf += (f"allow_anonymous false\npassword_file {passwords}\ncafile {self.ca_file}\n"
                     f"certfile {self.root / 'server.crt'}\nkeyfile {self.root / 'server.key'}\n")
        self.conf.write_text(conf)
        self.log = self.root / "mosquitto.log"
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"mqtt://127.0.0.1:{self.port}"

    @property
    def ca_file(self) -> Path:
        return self.root / "ca.crt"

    def _make_certs(self) -> None:
        """A CA and a server certificate for 127.0.0.1 (EC keys: milliseconds with openssl)."""
        def openssl(*args: str) -> None:
            subprocess.run(["openssl", *args], cwd=self.root, check=True, capture_output=True)

        ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
        openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "1", "-subj", "/CN=test-ca")
        openssl("req", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=localhost")
        (self.root / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
        openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                "-out", "server.crt", "-days", "1", "-extfile", "san.ext")
        for name in ("ca.crt", "server.crt", "server.key"):
            (self.root / name).chmod(0o644)  # test-only keys

    def start(self, timeout: float = 10.0) -> "Mosquitto":
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen([self.binary, "-c", str(self.conf)], stdout=log, stderr=log)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"mosquitto exited: {self.log.read_text()[-2000:]}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"mosquitto did not listen on {self.port}: {self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)


class Subscriber:
    """Subscribes to ``topic`` (again after every reconnect) and records (topic, payload, retain)."""

    def __init__(self, port: int, topic: str = "#", *, ca_file: Path | None = None,
                 user: tuple[str, str] | None = None) -> None:
        self.messages: list[tuple[str, bytes, bool]] = []
        self._cond = threading.Condition()
        self.client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=f"test-sub-{id(self)}")
        if ca_file is not None:
            self.client.tls_set(ca_certs=str(ca_file))
        if user is not None:
            self.client.username_pw_set(*user)
        # back well before the service (which retries after 1 s), so nothing is published unseen
        self.client.reconnect_delay_set(min_delay=0.1, max_delay=0.2)
        self.client.on_connect = lambda c, u, f, rc, p: c.subscribe(topic, qos=1)
        self.client.on_message = self._on_message
        self.client.connect("127.0.0.1", port, keepalive=30)
        self.client.loop_start()

    def _on_message(self, client, userdata, msg) -> None:
        with self._cond:
            self.messages.append((msg.topic, bytes(msg.payload), bool(msg.retain)))
            self._cond.notify_all()

    def wait_for(self, predicate: Callable[[list[tuple[str, bytes, bool]]], bool], timeout: float = 15.0) -> list:
        """Block until ``predicate(messages)`` holds; the messages, or AssertionError with them."""
        with self._cond:
            if not self._cond.wait_for(lambda: predicate(self.messages), timeout):
                raise AssertionError(f"timed out; got {[(t, p[:80], r) for t, p, r in self.messages]}")
            return list(self.messages)

    def on(self, topic: str) -> list[bytes]:
        with self._cond:
            return [p for t, p, _ in self.messages if t == topic]

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()
