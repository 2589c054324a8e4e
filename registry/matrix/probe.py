"""Run the real check on this machine: `get_kernel` with its eager check, as a `CheckRecord`.

I/O at the edge (network, GPU). The loader decides the path (hub variant or fallback) and checks a hub
variant against eager PyTorch itself; a fallback module is checked here with the same
`registry.check.run_check`, so every record says whether the code a user gets here is correct.
"""

from __future__ import annotations

import datetime
import time

from registry.resolve import current_env

from .records import CheckRecord


def _max_errors(result) -> dict[str, float]:
    """op/dtype/direction -> worst relative error of a `registry.check.CheckResult`."""
    out: dict[str, float] = {}
    for c in result.cases:
        key = f"{c.op}/{c.dtype}/{c.direction}"
        out[key] = max(out.get(key, 0.0), c.error) if c.error == c.error else float("nan")
    return out


def probe(repo: str, version: int, commit: str, *, endpoint: str | None, token: str | None) -> CheckRecord:
    """Load `repo` v`version` here (fallback allowed), check it against eager, and describe what happened."""
    import torch

    from registry.check import device_label, run_check
    from registry.loader import get_kernel

    env = current_env()
    started = time.monotonic()
    checked_at = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    try:
        module = get_kernel(repo, version=version, revision=None, fallback="compile", check="always",
                            endpoint=endpoint, token=token)
    except Exception as e:  # the record must say why loading failed, whatever it was
        return CheckRecord(env, repo, version, commit, None, "error", f"{type(e).__name__}: {e}", False, {},
                           f"get_kernel raised {type(e).__name__}: {e}", checked_at, time.monotonic() - started)
    info = module.__kernel_info__
    result = info.check
    if result is None:  # the loader checks hub variants; a fallback module is checked here
        device = "cuda" if torch.cuda.is_available() else "cpu"
        result = run_check(module, info.reference, list(info.api), device_label(device))
    return CheckRecord(
        env=env, repo=repo, version=version, commit=info.commit or commit, variant=info.variant,
        source=info.source, reason=info.reason, passed=bool(result.passed), max_error=_max_errors(result),
        detail=result.summary(), checked_at=checked_at, duration_s=round(time.monotonic() - started, 3),
    )
