"""`kernel-hub serve` says where it listens, what it serves from and how it logs, then one line per request
(`--log-level`); a real server process, its output read as a user sees it."""

from __future__ import annotations

import re
import time

import httpx2
from hub_process import HubProcess


def _log_after(proc: HubProcess, wanted: str, timeout_s: float = 10) -> str:
    """The server's output once it holds `wanted` (lines are written after the answer is sent)."""
    deadline = time.monotonic() + timeout_s
    while wanted not in proc.log() and time.monotonic() < deadline:
        time.sleep(0.05)
    return proc.log()


def test_startup_lines_and_one_line_per_request(tmp_path):
    data = tmp_path / "hub"
    proc = HubProcess(data).start()
    try:
        page = httpx2.get(f"{proc.url}/kernels/nobody/nothing")
        api = httpx2.get(f"{proc.url}/api/models/nobody/nothing")
        log = _log_after(proc, api.headers["X-Request-Id"])
    finally:
        proc.stop()
    lines = log.splitlines()
    assert lines[0] == f"kernel-hub serve: http://127.0.0.1:{proc.port}"
    assert lines[1] == f"  data:    {data.resolve()} (new hub)"
    assert (
        lines[2]
        == f"  storage: SQLite {data.resolve() / 'hub.sqlite3'} (WAL), blobs in {data.resolve() / 'blobs'}"
    )
    assert lines[3] == "  log:     one line per request (--log-level info)"
    for r, path in ((page, "/kernels/nobody/nothing"), (api, "/api/models/nobody/nothing")):
        (line,) = [x for x in lines if x.endswith(r.headers["X-Request-Id"])]  # one line, not two
        assert re.fullmatch(rf"\S+Z 127\.0\.0\.1 GET {path} 404 \d+ B \d+\.\d ms [0-9a-f]{{32}}", line), line
    assert "Traceback" not in log and "Uvicorn running" not in log

    again = HubProcess(data, "--log-level", "warning").start()
    try:
        r = httpx2.get(f"{again.url}/")
        time.sleep(0.5)
        log = again.log()
    finally:
        again.stop()
    assert f"  data:    {data.resolve()} (existing hub)" in log
    assert "problems only (--log-level warning)" in log and r.headers["X-Request-Id"] not in log
