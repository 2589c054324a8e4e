"""Real servers for tests and benchmarks: PostgreSQL, SeaweedFS (S3) and nginx, each started on 127.0.0.1.

One home for them (shared by the fleet tests, the hub hardening tests and bench/). Each class starts the real
program and raises `ServerUnavailable` with the reason and how to get the program when it cannot; tests turn
that into a skip that says so (`servers.require`), never a pass.
"""

from __future__ import annotations

import random
import socket
import time
from collections.abc import Callable


class ServerUnavailable(RuntimeError):
    """A server could not be started here: the message says why and how to make it work."""


def port_pair_free(port: int, offset: int = 0) -> bool:
    """Whether `port` (and `port + offset`, when given) can be bound on 127.0.0.1 now."""
    for p in {port, port + offset}:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", p))
            except OSError:
                return False
    return True


def free_ports(n: int, offset: int = 0, low: int = 20000, high: int = 30000) -> list[int]:
    """`n` distinct ports that are free now, each with `port + offset` free too (SeaweedFS's gRPC ports)."""
    out: list[int] = []
    while len(out) < n:
        p = random.randrange(low, high)
        if p not in out and p + offset not in out and port_pair_free(p, offset):
            out.append(p)
    return out


def wait_for(check: Callable[[], bool], timeout_s: float, what: str, log: Callable[[], str] = str) -> None:
    """Poll `check` until it is true; ServerUnavailable naming `what` (and the log tail) after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise ServerUnavailable(f"{what} did not come up within {timeout_s:g} s: {log()[-2000:]}")
        time.sleep(0.1)


def require(start: Callable[[], object]):
    """Start a server or skip the calling test with the server's reason (pytest's skip names it)."""
    import pytest

    try:
        return start()
    except ServerUnavailable as e:
        pytest.skip(str(e))
