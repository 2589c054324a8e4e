"""A hub fleet for tests and benchmarks: PostgreSQL + SeaweedFS (S3) + N `kernel-hub serve` replicas that keep
no state of their own + nginx balancing over them. The same helpers as `hub_process.HubProcess` (`url`,
`token`, `org`), so hub tests run against it unchanged (`pytest --hub fleet`).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from hub_process import REPO_ROOT
from servers import free_ports
from servers.nginx import Nginx
from servers.nginx_accel import ACCEL_PREFIX, accel_s3_conf, cached_accel_s3_conf
from servers.postgres import PostgresServer
from servers.seaweedfs import SeaweedS3

from registry.commands.serve import HubNotServing, ServeProcess

BUCKET = "kernel-hub"


class Fleet:
    """`n` replicas on one PostgreSQL database and one bucket, behind one nginx (`url`)."""

    def __init__(self, n: int = 3, prefix: str = "hub", *replica_args: str):
        self.n, self.replica_args = n, list(replica_args)
        self.dir = Path(tempfile.mkdtemp(prefix="kernel-hub-fleet-"))
        self.pg: PostgresServer | None = None
        self.s3: SeaweedS3 | None = None
        self.nginx: Nginx | None = None
        self.replicas: list[ServeProcess] = []
        self.blobs = f"s3://{BUCKET}/{prefix}"
        self._caches: list[Path] = []
        self.data_dir = None  # nothing is local: tests that read the data folder do not apply

    @property
    def env(self) -> dict[str, str]:
        """What a replica or an admin command needs: the S3 variables (the database URL goes in --db)."""
        path = str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")
        return {**os.environ, **self.s3.env, "PYTHONPATH": path}

    @property
    def storage_args(self) -> list[str]:
        return ["--db", self.pg.url, "--blobs", self.blobs]

    def start(self) -> Fleet:
        """Start everything (ServerUnavailable says which server could not start, and how to get it)."""
        self.pg = PostgresServer().start()
        self.s3 = SeaweedS3().start()
        self.s3.bucket(BUCKET)
        self.replicas = [self._replica(i) for i in range(self.n)]
        # All at once, as a fleet starts: one of them creates the schema, the others wait for it.
        try:
            with ThreadPoolExecutor(self.n) as pool:
                list(pool.map(lambda r: r.start(timeout_s=120), self.replicas))
        except HubNotServing as e:
            raise HubNotServing(f"{e}\n{self.log()}") from None
        self.nginx = Nginx.balancer([f"127.0.0.1:{r.port}" for r in self.replicas]).start()
        self.url = self.nginx.url
        return self

    def _replica(self, i: int, *extra: str) -> ServeProcess:
        args = [*self.storage_args, "--page-size", "100", *self.replica_args, *extra]
        return ServeProcess(None, *args, log_path=self.dir / f"replica-{i}.log", cwd=REPO_ROOT, env=self.env)

    def accel_replicas(self, n: int) -> list[ServeProcess]:
        """`n` more replicas on this storage, started, that answer downloads with X-Accel-Redirect (the caller
        stops them); `accel_nginx` is the front they need: the recommended deployment (docs/SERVING.md)."""
        first = len(list(self.dir.glob("replica-*.log")))
        replicas = [self._replica(first + i, "--accel-redirect", ACCEL_PREFIX) for i in range(n)]
        with ThreadPoolExecutor(n) as pool:
            list(pool.map(lambda r: r.start(timeout_s=120), replicas))
        return replicas

    def accel_nginx(self, replicas: list[ServeProcess], workers: int | str = 1) -> Nginx:
        """nginx (not started) in front of `accel_replicas`, fetching blob bytes from the object store itself."""
        port = free_ports(1)[0]
        upstreams = [r.url.removeprefix("http://") for r in replicas]
        return Nginx(accel_s3_conf(upstreams, self.s3.endpoint, port), port, workers)

    def cached_nginx(self, replicas: list[ServeProcess], workers: int | str = 1) -> Nginx:
        """`accel_nginx` with nginx's cache in front of commit-named files (not started; a fresh cache)."""
        port = free_ports(1)[0]
        upstreams = [r.url.removeprefix("http://") for r in replicas]
        # Not under self.dir (0700): nginx's workers run as another user when nginx starts as root.
        cache = Path(tempfile.mkdtemp(prefix="kernel-hub-nginx-cache-"))
        cache.chmod(0o755)
        self._caches.append(cache)
        return Nginx(cached_accel_s3_conf(upstreams, self.s3.endpoint, port, cache), port, workers)

    def kill(self, i: int) -> None:
        """kill -9 replica `i` (no clean-up of any kind can run)."""
        proc = self.replicas[i].proc
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        self.replicas[i].proc = None

    def restart(self, i: int) -> None:
        self.replicas[i].stop()
        self.replicas[i].start(timeout_s=90)

    def admin(self, *args: str) -> str:
        """Run an admin command (`token create …`) on the fleet's database; returns its stdout."""
        argv = [sys.executable, "-m", "registry.cli", *args, "--db", self.pg.url]
        out = subprocess.run(argv, cwd=REPO_ROOT, env=self.env, capture_output=True, text=True, check=False)
        if out.returncode:
            raise RuntimeError(f"kernel-hub {' '.join(args)} failed: {out.stderr[-2000:]}")
        return out.stdout.strip()

    def token(self, user: str, write: list[str] | tuple[str, ...] = ()) -> str:
        return self.admin("token", "create", "--user", user, *(["--write", *write] if write else []))

    def org(self, name: str, trusted: bool = False, members: tuple[str, ...] | list[str] = ()) -> None:
        args = ["org", "create", name, *(["--trusted"] if trusted else [])]
        for m in members:
            args += ["--member", m]
        self.admin(*args)

    def log(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-2000:]}" for p in self.dir.glob("*.log")
        )

    def stop(self) -> None:
        for part in (self.nginx, *self.replicas):
            if part is not None:
                part.stop()
        for server in (self.s3, self.pg):
            if server is not None:
                server.destroy()
        if self.nginx is not None:
            self.nginx.destroy()
        for d in (self.dir, *self._caches):
            shutil.rmtree(d, ignore_errors=True)
