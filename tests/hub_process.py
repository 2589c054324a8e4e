"""A real `kernel-hub serve` process for tests: started on a free 127.0.0.1 port, with admin helpers.

A plain module (not conftest.py) so any test directory can import it by name: pytest puts `tests/`
on sys.path, but several directories have their own conftest.py, so `from conftest import` is ambiguous.
"""

from __future__ import annotations

import contextlib
import io
import os
import socket
import subprocess
import sys
from pathlib import Path

from registry.commands.serve import HubNotServing, wait_until_serving

REPO_ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class HubProcess:
    """A `kernel-hub serve` subprocess on a free port, with admin helpers on its data dir."""

    def __init__(self, data_dir: Path, *extra_args: str):
        self.data_dir = Path(data_dir)
        self.extra_args = list(extra_args)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.log_path = self.data_dir.parent / f"{self.data_dir.name}-{self.port}.log"

    def start(self) -> HubProcess:
        cmd = [
            sys.executable,
            "-m",
            "registry.cli",
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--data",
            str(self.data_dir),
            *self.extra_args,
        ]
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        with open(self.log_path, "ab") as log:  # the child keeps its own copy of the descriptor
            self.proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_until_serving(self.url, self.proc, timeout_s=60)
        except HubNotServing as e:
            self.stop()
            raise RuntimeError(f"{e}: {self.log()}") from None
        return self

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def restart(self) -> HubProcess:
        self.stop()
        return self.start()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:] if self.log_path.exists() else ""

    def _admin(self, *args: str) -> str:
        from registry.cli import main

        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            rc = main([*args, "--data", str(self.data_dir)])
        assert rc == 0, f"kernel-hub {' '.join(args)} failed with {rc}"
        return out.getvalue().strip()

    def token(self, user: str, write: list[str] | tuple[str, ...] = ()) -> str:
        """A new token for `user` (writes its own namespace, plus `write`)."""
        return self._admin("token", "create", "--user", user, *(["--write", *write] if write else []))

    def org(self, name: str, trusted: bool = False, members: tuple[str, ...] | list[str] = ()) -> None:
        args = ["org", "create", name, *(["--trusted"] if trusted else [])]
        for m in members:
            args += ["--member", m]
        self._admin(*args)
