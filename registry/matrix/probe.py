"""Run the real check on this machine: `get_kernel` with its eager check, as a `CheckRecord`.

I/O at the edge (network, GPU). The loader picks the path (hub variant, else the torch.compile
fallback) and checks what it returns against the eager reference (`check="always"`: no cached pass),
so the record says whether the code a user gets on this machine is correct, and how far off it is.
"""

from __future__ import annotations

import datetime
import math
import time
from collections.abc import Mapping

from registry.client.resolve import current_env

from .records import CheckRecord


def max_errors(check: Mapping) -> dict[str, float]:
    """op/dtype/direction -> worst relative error among the loader's check cases (NaN stays NaN)."""
    out: dict[str, float] = {}
    for c in check.get("cases") or []:
        key = f"{c['op']}/{c['dtype'].removeprefix('torch.')}/{c['direction']}"
        err = float(c["error"])
        prev = out.get(key, 0.0)
        out[key] = err if math.isnan(err) or math.isnan(prev) else max(prev, err)
    return out


def record_from_info(
    info: Mapping, env, repo: str, version: int, commit: str, checked_at: str, seconds: float
) -> CheckRecord:
    """A CheckRecord from a loaded module's `__kernel_info__` (pure)."""
    check = info.get("check") or {}
    if "passed" in check:
        passed, detail = bool(check["passed"]), str(check.get("summary", ""))
    else:  # eager fallback: the reference itself runs, nothing to compare against
        passed, detail = info.get("source") == "fallback-eager", str(check.get("status", "no check ran"))
    return CheckRecord(
        env=env,
        repo=repo,
        version=version,
        commit=info.get("commit") or commit,
        variant=info.get("variant"),
        source=str(info.get("source")),
        reason=info.get("reason") if info.get("variant") is None else None,
        passed=passed,
        max_error=max_errors(check),
        detail=detail,
        checked_at=checked_at,
        duration_s=round(seconds, 3),
    )


def probe(repo: str, version: int, commit: str, *, endpoint: str | None, token: str | None) -> CheckRecord:
    """Load `repo` v`version` here (fallback allowed), check it against eager, and describe what happened."""
    from registry import KernelLoadError, get_kernel

    env = current_env()
    started = time.monotonic()
    checked_at = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    try:
        module = get_kernel(
            repo, version=version, fallback="compile", check="always", endpoint=endpoint, token=token
        )
    except KernelLoadError as e:
        seconds = time.monotonic() - started
        return CheckRecord(
            env,
            repo,
            version,
            commit,
            None,
            "error",
            str(e).splitlines()[0],
            False,
            {},
            f"get_kernel failed: {str(e).splitlines()[0]}",
            checked_at,
            round(seconds, 3),
        )
    return record_from_info(
        module.__kernel_info__, env, repo, version, commit, checked_at, time.monotonic() - started
    )
