"""A throwaway PostgreSQL cluster: `initdb` + `pg_ctl` as the `postgres` user, data in a temp dir.

Debian's PostgreSQL (`/usr/lib/postgresql/<N>/bin`) is used as installed; `initdb` refuses to run as root, so
the cluster belongs to `postgres` and runs under `runuser` when we are root.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from . import ServerUnavailable, free_ports

HOW = "install PostgreSQL (Debian: apt-get install -y postgresql) and run the tests as root or as postgres"


def _bin(name: str) -> str:
    found = shutil.which(name) or next(
        iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))[-1:]), None
    )
    if not found:
        raise ServerUnavailable(f"PostgreSQL's {name} is not installed: {HOW}")
    return found


class PostgresServer:
    """One cluster with database `hub` for user `hub` (trust auth) on a free 127.0.0.1 port."""

    def __init__(self, database: str = "hub"):
        self.database = database
        self.port = free_ports(1)[0]
        self.dir = Path(tempfile.mkdtemp(prefix="kernel-hub-pg-"))
        self.data = self.dir / "data"
        self.log_path = self.dir / "postgres.log"
        self.url = f"postgresql+psycopg://hub@127.0.0.1:{self.port}/{database}"

    def _as_postgres(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        if os.geteuid() == 0:
            if not shutil.which("runuser"):
                raise ServerUnavailable(f"runuser is missing, so initdb cannot run as postgres: {HOW}")
            argv = ("runuser", "-u", "postgres", "--", *argv)
        proc = subprocess.run(argv, check=False, capture_output=True, text=True)
        if check and proc.returncode:
            raise ServerUnavailable(
                f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr[-1500:]}; {HOW}"
            )
        return proc

    def start(self) -> PostgresServer:
        """initdb (first time), start, create the database; returns self once it accepts connections."""
        if not self.data.exists():
            if os.geteuid() == 0:
                shutil.chown(self.dir, "postgres")
            args = ("-D", str(self.data), "-U", "hub", "--auth=trust", "-E", "UTF8", "--locale=C.UTF-8")
            self._as_postgres(_bin("initdb"), *args)
            self._pg_ctl("start")
            self._as_postgres(
                _bin("createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "hub", self.database
            )
        else:
            self._pg_ctl("start")
        return self

    def create_database(self, name: str) -> str:
        """A new empty database on this server; returns its URL."""
        self._as_postgres(_bin("createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "hub", name)
        return self.url.rpartition("/")[0] + "/" + name

    def _pg_ctl(self, action: str) -> None:
        opts = f"-c listen_addresses=127.0.0.1 -p {self.port} -c unix_socket_directories={self.dir}"
        if action == "start":
            self._as_postgres(
                _bin("pg_ctl"), "-D", str(self.data), "-l", str(self.log_path), "-o", opts, "-w", "start"
            )
        else:
            self._as_postgres(_bin("pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop", check=False)

    def stop(self) -> None:
        """Stop the server (the data stays: `start` brings the same cluster back)."""
        if self.data.exists():
            self._pg_ctl("stop")

    def destroy(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
