"""`get_kernel`: the fastest trusted, verified, checked kernel variant for this machine, else the same API as a fallback.

The sequence (docs/ARCHITECTURE.md, docs/CONTRACTS.md "Loader" and "Trust"): `plan.plan_load` settles the
commit, the publisher's trust and the variants that fit, fastest first by this GPU arch's speed records; then
one variant at a time is downloaded and verified (`verify`), imported (`importer`), checked against the
package's eager reference and timed against it (`gates`). The first that passes everything is returned.
Otherwise `fallback` decides: "compile" = torch.compile of the package's `reference` functions (taken from a
verified variant, CPU builds first), "eager" = those functions as they are, None = raise with the whole trace.
Every returned module carries `__kernel_info__` saying what was loaded and why.
"""

from __future__ import annotations

import logging
import os
import types
from collections.abc import Mapping, Sequence

from registry.errors import KernelLoadError
from registry.gcpause import gc_paused

from . import shape_dispatch
from .fallback import FALLBACK_MODES, build_fallback
from .gates import cached_slow, check_gate, check_info, said, shape_gate, speed_gate, speed_info
from .importer import load_variant, reference_in, reference_of
from .plan import Load, Refused, plan_load
from .resolve import trace_lines
from .shape_speed import REFERENCE_ATTR, Shape, as_shape
from .speed import SPEED_MODES
from .trust import TrustRemoteCode
from .verify import fetch_verified

# Progress at INFO (the CLI and the demo show registry.* INFO lines on stderr; a library user sees none
# unless they configure logging), refusals at INFO too: they are normal outcomes, __kernel_info__ keeps them.
log = logging.getLogger(__name__)


__all__ = ["KernelLoadError", "get_kernel"]


def _check_arguments(repo_id, version, fallback, check, speed_check, trust_remote_code) -> None:
    from huggingface_hub.utils import validate_repo_id

    # As HfApi would (fetch.py asks the refs route itself): a clear ValueError before any request or cache path.
    validate_repo_id(repo_id)
    if version is not None and (not isinstance(version, int) or isinstance(version, bool)):
        raise TypeError(
            f"version must be an int (the N of branch vN), not {type(version).__name__} {version!r}"
            + (f": use version={int(version)}" if isinstance(version, str) and version.isdigit() else "")
        )
    if fallback not in (*FALLBACK_MODES, None):
        raise ValueError(
            f"fallback={fallback!r}: use 'compile', 'eager' or None (raise instead of falling back)"
        )
    if check not in ("once", "always", None):
        raise ValueError(f"check={check!r}: use 'once' (cached pass), 'always' or None (skip)")
    if speed_check not in (*SPEED_MODES, None):
        raise ValueError(f"speed_check={speed_check!r}: use 'once' (cached verdict), 'always' or None (skip)")
    if not isinstance(trust_remote_code, (bool, list)):
        raise TypeError(f"trust_remote_code must be a bool or a list of repo ids, not {trust_remote_code!r}")


@gc_paused()  # registry/gcpause.py: half of a warm load was full collections over torch's objects
def get_kernel(
    repo_id: str,
    version: int | None = None,
    revision: str | None = None,
    *,
    fallback: str | None = "compile",
    check: str | None = "once",
    speed_check: str | None = "once",
    trust_remote_code: TrustRemoteCode = False,
    publisher_keys: Sequence[str] | None = None,
    sigstore_identities: Sequence[str] | None = None,
    lockfile: str | os.PathLike | None = None,
    endpoint: str | None = None,
    token: str | None = None,
    backend: str | None = None,
    shapes: Sequence[Shape | Mapping | tuple] | None = None,
) -> types.ModuleType:
    """Load `repo_id` at `version` (branch vN) or `revision`; see the module docstring for the steps.

    `backend="cpu"` makes CPU builds eligible as the kernel (as in `kernels`); by default a machine
    without a CUDA device gets the fallback with reason "no CUDA device". `speed_check=None` serves a
    kernel that passed the check even when it is slower than its fallback. `lockfile` (a `kernels.lock`)
    names the commit instead of a version lookup; `sigstore_identities` are the workflows whose keyless
    signature (metadata.json.sigstore) may vouch for a build; `$LOCAL_KERNELS` loads from a folder here.
    `shapes` (`shape_speed.Shape`s or their tuples, e.g. `("gated_mlp", (4096, 14336), "silu")`) are the
    user's layer shapes: a variant that passed the speed check is also timed there (once per GPU, cached
    per shape, unless speed_check=None); at the (shape, row bucket) pairs where it is slower than its fallback
    the served module's ops call the fallback (`shape_dispatch`; listed in `__kernel_info__["speed"]
    ["fallback_at"]`), and a kernel slower at all of them is refused. The verdicts are in
    `__kernel_info__["speed"]["shapes"]`.
    """
    _check_arguments(repo_id, version, fallback, check, speed_check, trust_remote_code)
    user_shapes = tuple(map(as_shape, shapes or ()))
    load = plan_load(
        repo_id,
        version,
        revision,
        check=check,
        speed_check=speed_check,
        trust_remote_code=trust_remote_code,
        publisher_keys=publisher_keys,
        sigstore_identities=sigstore_identities,
        lockfile=lockfile,
        endpoint=endpoint,
        token=token,
        backend=backend,
    )
    asked = f"v{version}" if version is not None else revision or ("kernels.lock" if lockfile else "main")
    _log_plan(load, asked)
    attempts: list[str] = []
    for name in load.order:
        module = _try_variant(load, name, attempts, user_shapes)
        if module is not None:
            return module
    reason = "; ".join(attempts) if attempts else load.resolution.fallback_reason
    log.info("no kernel variant used (%s); fallback=%s", reason, fallback)
    if fallback is None:
        raise KernelLoadError(
            f"{repo_id}@{load.commit[:12]}: no kernel variant could be used ({reason}) and fallback=None.\n"
            + "\n".join(trace_lines(load.resolution, attempts))
        )
    return _fallback(load, attempts, reason, fallback)


def _log_plan(load: Load, asked: str) -> None:
    hub = load.hub
    where = (
        "local folder" if load.local is not None else "cache, hub offline" if hub.offline else hub.endpoint
    )
    log.info(
        "%s %s -> commit %s (%s); variants to try: %s",
        load.repo_id,
        asked,
        load.commit[:12],
        where,
        ", ".join(load.order) or "none",
    )


def _try_variant(
    load: Load, name: str, attempts: list[str], shapes: tuple[Shape, ...] = ()
) -> types.ModuleType | None:
    """`name` verified, imported, checked and timed, with its `__kernel_info__`; else None and why in `attempts`."""
    known_slow = cached_slow(load, name)
    if known_slow is not None:
        attempts.append(f"{name}: {known_slow.reason()} (cached)")
        log.info("%s: skipped, %s (cached verdict)", name, known_slow.reason())
        return None
    try:
        log.info("%s: fetching and verifying", name)
        module, verification = load_variant(load, name)
        reference, api = reference_of(module, load.metas[name])
        log.info("%s: checking against the eager reference on %s (check=%s)", name, load.device, load.check)
        result = check_gate(load, module, reference, api, name)
        log.info(
            "%s: check %s; speed check vs the fallback (speed_check=%s)", name, said(result), load.speed_check
        )
        speed = speed_gate(load, module, reference, api, name)
        setattr(module, REFERENCE_ATTR, reference)  # shape_speed times the user's shapes against it
        verdicts, lost = shape_gate(load, module, reference, shapes, name)
        if lost:
            module = shape_dispatch.serve(module, reference, lost)
    except Refused as e:
        attempts.append(f"{name}: {e}")
        log.info("%s: refused: %s", name, e)
        return None
    log.info("%s: serving it (speed check %s)", name, said(speed))
    verdict = next(v for v in load.resolution.verdicts if v.variant == name)
    module.__kernel_info__ = {
        **load.info,
        "offline": load.hub.offline,
        "offline_reason": load.hub.offline_reason,
        "variant": name,
        "source": "hub" if load.local is None else "local",
        "reason": "; ".join([*attempts, f"{name}: {verdict.reason}"]),
        "check": check_info(result, load.check),
        "speed": {
            **speed_info(speed),
            **({"shapes": verdicts} if verdicts else {}),
            **({"fallback_at": shape_dispatch.describe(lost)} if lost else {}),
        },
        "verification": verification,
        "trust": verification.pop("trust"),
        "detail": verdict.detail,
        "trace": trace_lines(load.resolution, attempts),
    }
    return module


def _fallback(load: Load, attempts: list[str], reason: str, mode: str) -> types.ModuleType:
    """The reference package from the first verifiable variant, compiled or eager, with its check."""
    source_failures: list[str] = []
    for name in load.resolution.references:
        try:
            path, verification = fetch_verified(load, name)
            reference, api = reference_in(path, load.metas[name])
        except Refused as e:
            source_failures.append(f"{name}: {e}")
            continue
        break
    else:
        raise KernelLoadError(
            f"{load.repo_id}@{load.commit[:12]}: no kernel variant could be used ({reason}), and the "
            "fallback's reference could not be fetched from any variant either:\n"
            + "\n".join(
                trace_lines(load.resolution, attempts) + [f"reference from {f}" for f in source_failures]
            )
        )
    module_name = f"{load.metas[name].get('id') or 'kernel'}_fallback"
    module = build_fallback(reference, api, mode, f"{module_name}_{mode}")
    result = None
    if mode == "compile":
        log.info("fallback-compile (reference from %s): checking torch.compile against eager", name)
        try:
            result = check_gate(load, module, reference, api, f"fallback-compile:{name}")
        except Refused as e:
            log.info("fallback-compile refused (%s); using eager", e)
            reason = f"{reason}; compiled fallback refused ({e}), using eager"
            mode, module = "eager", build_fallback(reference, api, "eager", f"{module_name}_eager")
    module.__kernel_info__ = {
        **load.info,
        "offline": load.hub.offline,
        "offline_reason": load.hub.offline_reason,
        "variant": None,
        "source": f"fallback-{mode}",
        "reason": reason,
        "check": check_info(result, load.check if mode == "compile" else "oracle"),
        "speed": {"status": "not needed: the fallback is the baseline"},
        "reference_variant": name,
        "verification": verification,
        "trust": verification.pop("trust"),
        "detail": {},
        "trace": trace_lines(load.resolution, attempts) + [f"reference from {f}" for f in source_failures],
    }
    return module
