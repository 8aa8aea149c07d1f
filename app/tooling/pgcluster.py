"""A throw-away PostgreSQL cluster (Debian's ``postgresql`` package) for the tests and for
``campusguard bench scale``: never for production data.

One cluster on a free loopback port, its socket in a temp folder, data in a temp folder
owned by ``postgres`` when run as root (the server refuses to run as root), fsync off for
speed. Each caller gets a database of its own (``new_database``).
"""

from __future__ import annotations

import glob
import itertools
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import psycopg


def find_bin_dir() -> Path | None:
    """Directory of initdb/pg_ctl: PATH first, then Debian's versioned directories (newest)."""
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    return Path(dirs[-1]).parent if dirs else None


class PostgresCluster:
    def __init__(self, bin_dir: Path, port: int) -> None:
        self.bin_dir, self.port = bin_dir, port
        self.root = Path(tempfile.mkdtemp(prefix="campusguard-pg-"))
        self.data, self.sock, self.log = self.root / "data", self.root / "sock", self.root / "server.log"
        self.user = "postgres"
        self._as_postgres = os.geteuid() == 0
        self._names = itertools.count()

    def _run(self, *args: str) -> None:
        cmd = [str(self.bin_dir / args[0]), *args[1:]]
        if self._as_postgres:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        subprocess.run(cmd, check=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)

    def start(self) -> PostgresCluster:
        self.sock.mkdir(parents=True)
        if self._as_postgres:
            shutil.chown(self.root, "postgres")
            shutil.chown(self.sock, "postgres")
            self.root.chmod(0o755)
        self._run("initdb", "-D", str(self.data), "-U", self.user, "-A", "trust", "--no-sync", "-E", "UTF8")
        opts = (f"-p {self.port} -k {self.sock} -c listen_addresses=127.0.0.1 -c fsync=off "
                "-c full_page_writes=off -c synchronous_commit=off -c max_connections=200")
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", opts, "-w", "-t", "60", "start")
        return self

    def stop(self) -> None:
        try:
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def admin_dsn(self, db: str = "postgres") -> str:
        return f"host=127.0.0.1 port={self.port} user={self.user} dbname={db}"

    def url(self, db: str) -> str:
        return f"postgresql+psycopg://{self.user}@127.0.0.1:{self.port}/{db}"

    def new_database(self) -> str:
        """A fresh, empty database; its SQLAlchemy URL."""
        name = f"t{os.getpid()}_{next(self._names)}"
        with psycopg.connect(self.admin_dsn(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE template0')
        return self.url(name)


def free_port() -> int:
    """A free loopback port for the cluster."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
