"""The two gates a loaded variant passes before it is served: the check against the package's eager
reference (`check.py`) and the speed check against the fallback (`speed.py`). Failing either refuses the
variant with the reason; a cached "slower than its fallback" verdict refuses it before it is downloaded.
"""

from __future__ import annotations

from .check import CheckCrashed, CheckResult, cache_key, checked
from .plan import Load, Refused
from .shape_dispatch import losing_buckets
from .shape_speed import timed_verdicts
from .speed import SpeedCheckCrashed, SpeedResult, speed_checked
from .speed_records import BASELINE


def check_gate(load: Load, module, reference, api: list[str], variant: str) -> CheckResult | None:
    """The check per `load.check`, cached under (commit, `variant`, device, torch); failing refuses the module."""
    key = cache_key(load.commit, variant, load.device)
    try:
        result = checked(
            module, reference, api, device=load.device, key=key, mode=load.check, cache=load.cache
        )
    except CheckCrashed as e:
        raise Refused(f"check crashed: {e}") from e
    if result is not None and not result.passed:
        raise Refused(f"check failed: {result.summary()}")
    return result


def cached_slow(load: Load, variant: str) -> SpeedResult | None:
    """A cached "slower than its fallback" verdict for `variant` here (then it is not even downloaded)."""
    if load.speed_check != "once":
        return None
    hit = load.speed_cache.get(cache_key(load.commit, variant, load.device))
    return hit if hit is not None and not hit.passed else None


def speed_gate(load: Load, module, reference, api: list[str], variant: str) -> SpeedResult | None:
    """The speed check per `load.speed_check`; a kernel slower than its fallback is refused."""
    key = cache_key(load.commit, variant, load.device)
    try:
        result = speed_checked(
            module, reference, api, device=load.device, key=key, mode=load.speed_check, cache=load.speed_cache
        )
    except SpeedCheckCrashed as e:
        raise Refused(f"speed check: {e}") from e
    if result is not None and not result.passed:
        raise Refused(result.reason())
    return result


def shape_gate(load: Load, module, reference, shapes, variant: str) -> tuple[list[dict], dict]:
    """The user's shapes (get_kernel's `shapes`) timed per `load.speed_check`: their verdicts and, per op and shape,
    the row buckets where the kernel lost (`shape_dispatch` sends those calls to the fallback). A kernel slower at
    every bucket of every shape is refused: it would serve none of them."""
    if not shapes or load.speed_check is None:
        return [], {}
    try:
        key = cache_key(load.commit, variant, load.device)
        verdicts = timed_verdicts(module, reference, shapes, key=key, device=load.device, mode=load.speed_check,
                                  cache_dir=load.hub.cache)  # fmt: skip
    except Exception as e:  # a crash or a wrong result at the user's shape refuses the kernel
        raise Refused(f"speed check at the given shapes: {type(e).__name__}: {e}") from e
    if all(not c.passed for v in verdicts.values() for c in v.cases):
        raise Refused(
            f"slower than {BASELINE} at the given shapes: "
            + "; ".join(f"{v.shape.key} " + ", ".join(c.workload for c in v.cases) for v in verdicts.values())
        )
    return [v.to_dict() for v in verdicts.values()], losing_buckets(verdicts)


def said(result: CheckResult | SpeedResult | None) -> str:
    """One word or two for a progress line: how a check or speed check ended."""
    if result is None:
        return "skipped"
    return "passed (cached)" if result.cached else "passed"


def check_info(result: CheckResult | None, mode: str | None) -> dict:
    """The `check` entry of `__kernel_info__`."""
    if mode == "oracle":
        return {"status": "not needed: the eager reference is the oracle"}
    if result is None:
        return {"status": "skipped (check=None)"}
    return {"status": said(result), **result.to_dict()}


def speed_info(result: SpeedResult | None) -> dict:
    """The `speed` entry of `__kernel_info__`."""
    if result is None:
        return {"status": "skipped (speed_check=None)"}
    return {"status": said(result), **result.to_dict()}
