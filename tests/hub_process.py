"""A real `kernel-hub serve` process for tests: started on a free 127.0.0.1 port, with admin helpers.

A plain module (not conftest.py) so any test directory can import it by name: pytest puts `tests/`
on sys.path, but several directories have their own conftest.py, so `from conftest import` is ambiguous.
"""

from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path

from registry.commands.serve import HubNotServing, ServeProcess

REPO_ROOT = Path(__file__).resolve().parents[1]


class HubProcess(ServeProcess):
    """A `kernel-hub serve` subprocess on a free port, with admin helpers on its data dir."""

    def __init__(self, data_dir: Path, *extra_args: str):
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        super().__init__(data_dir, *extra_args, cwd=REPO_ROOT, env=env)

    def start(self) -> HubProcess:
        try:
            return super().start(timeout_s=60)
        except HubNotServing as e:
            raise RuntimeError(f"{e}: {self.log()[-4000:]}") from None

    def restart(self) -> HubProcess:
        self.stop()
        return self.start()

    def log(self) -> str:
        """The server's whole output so far: start-up lines, one line per request, warnings."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

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
