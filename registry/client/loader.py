"""`get_kernel`: the fastest verified, checked kernel variant for this machine, else the same API as a fallback.

Steps (docs/ARCHITECTURE.md): version -> commit (online refs, or the cache offline); every variant decided by
`resolve.resolve_variant` (kernels' rules + GPU arch); the accepted ones, best first, are downloaded
one at a time, their signature and digests verified before any import, imported under their unique
`metadata.id`, and checked against the package's eager reference. The first that passes is returned.
Otherwise `fallback` decides: "compile" = torch.compile of the package's `reference` functions (taken
from a verified variant, CPU builds first), "eager" = those functions as they are, None = raise with
the whole trace. Every returned module carries `__kernel_info__` saying what was loaded and why.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import types
from dataclasses import dataclass
from pathlib import Path

from kernels.hf_hub import RepoInfo
from kernels.importer import _import_from_path

from registry.errors import KernelHubError, KernelLoadError
from registry.spec.digest import verify_digests
from registry.spec.signing import SignatureError, verify_metadata

from .check import CheckCache, CheckCrashed, CheckResult, cache_key, checked
from .fallback import ACTIVATION_ARGS, FALLBACK_MODES, build_fallback
from .fetch import FetchError, Hub, download_variant, publisher_keys, resolve_commit, variant_metadata
from .resolve import Resolution, current_env, reference_sources, resolve_variant, trace_lines

ALLOW_UNSIGNED_ENV = "KERNEL_HUB_ALLOW_UNSIGNED"


__all__ = ["KernelLoadError", "get_kernel"]


class Refused(KernelHubError):
    """One variant was refused after download: verification, import or check failed."""


def get_kernel(
    repo_id: str,
    version: int | None = None,
    revision: str | None = None,
    *,
    fallback: str | None = "compile",
    check: str | None = "once",
    endpoint: str | None = None,
    token: str | None = None,
    backend: str | None = None,
) -> types.ModuleType:
    """Load `repo_id` at `version` (branch vN) or `revision`; see the module docstring for the steps.

    `backend="cpu"` makes CPU builds eligible as the kernel (as in `kernels`); by default a machine
    without a CUDA device gets the fallback with reason "no CUDA device".
    """
    if fallback not in (*FALLBACK_MODES, None):
        raise ValueError(
            f"fallback={fallback!r}: use 'compile', 'eager' or None (raise instead of falling back)"
        )
    if check not in ("once", "always", None):
        raise ValueError(f"check={check!r}: use 'once' (cached pass), 'always' or None (skip)")
    hub = Hub.from_env(endpoint, token)
    try:
        commit = resolve_commit(hub, repo_id, version, revision)
        metas = variant_metadata(hub, repo_id, commit)
    except FetchError as e:
        raise KernelLoadError(f"{repo_id}: nothing to load and no reference to fall back to: {e}") from e
    env = current_env()
    load = _Load(
        hub=hub,
        repo_id=repo_id,
        commit=commit,
        metas=metas,
        resolution=resolve_variant(metas, env, backend=backend),
        device="cuda" if env.gpu_arch is not None and backend != "cpu" else "cpu",
        check=check,
        cache=CheckCache(hub.cache),
        info={
            "repo": repo_id,
            "version": version,
            "revision": revision,
            "commit": commit,
            "endpoint": hub.endpoint,
            "offline": hub.offline,
        },
    )

    attempts: list[str] = []
    for name in load.resolution.accepted:
        try:
            module, verification = _load_variant(hub, repo_id, commit, name)
            reference, api = _reference(module, metas[name], Path(module.__file__))
            result = _check(load, module, reference, api, name)
        except Refused as e:
            attempts.append(f"{name}: {e}")
            continue
        verdict = next(v for v in load.resolution.verdicts if v.variant == name)
        module.__kernel_info__ = {
            **load.info,
            "variant": name,
            "source": "hub",
            "reason": "; ".join([*attempts, f"{name}: {verdict.reason}"]),
            "check": _check_info(result, check),
            "verification": verification,
            "detail": verdict.detail,
            "trace": trace_lines(load.resolution, attempts),
        }
        return module

    reason = "; ".join(attempts) if attempts else load.resolution.fallback_reason
    if fallback is None:
        raise KernelLoadError(
            f"{repo_id}@{commit[:12]}: no kernel variant could be used ({reason}) and fallback=None.\n"
            + "\n".join(trace_lines(load.resolution, attempts))
        )
    return _fallback(load, attempts, reason, fallback)


@dataclass(frozen=True)
class _Load:
    """What one get_kernel call has settled before trying variants: where, which commit, what to check."""

    hub: Hub
    repo_id: str
    commit: str
    metas: dict[str, dict]
    resolution: Resolution
    device: str
    check: str | None
    cache: CheckCache
    info: dict  # the __kernel_info__ keys every outcome shares


def _fallback(load: _Load, attempts: list[str], reason: str, mode: str) -> types.ModuleType:
    """The reference package from the first verifiable variant, compiled or eager, with its check."""
    source_failures: list[str] = []
    for name in reference_sources(load.metas):
        try:
            path = download_variant(load.hub, load.repo_id, load.commit, name)
            verification = verify_variant(load.hub, load.repo_id, path)
            reference, api = _reference(None, load.metas[name], _package_init(path, load.metas[name]))
        except (FetchError, Refused) as e:
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
    module_name = f"{load.metas[name].get('id') or 'fused_mlp'}_fallback"
    module = build_fallback(reference, api, mode, f"{module_name}_{mode}")
    result = None
    if mode == "compile":
        try:
            result = _check(load, module, reference, api, f"fallback-compile:{name}")
        except Refused as e:
            reason = f"{reason}; compiled fallback refused ({e}), using eager"
            mode, module = "eager", build_fallback(reference, api, "eager", f"{module_name}_eager")
    module.__kernel_info__ = {
        **load.info,
        "variant": None,
        "source": f"fallback-{mode}",
        "reason": reason,
        "check": _check_info(result, load.check if mode == "compile" else "oracle"),
        "reference_variant": name,
        "verification": verification,
        "detail": {},
        "trace": trace_lines(load.resolution, attempts) + [f"reference from {f}" for f in source_failures],
    }
    return module


def _check(load: _Load, module, reference, api: list[str], variant: str) -> CheckResult | None:
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


def _check_info(result: CheckResult | None, mode: str | None) -> dict:
    if mode == "oracle":
        return {"status": "not needed: the eager reference is the oracle"}
    if result is None:
        return {"status": "skipped (check=None)"}
    status = "passed (cached)" if result.cached else "passed"
    return {"status": status, **result.to_dict()}


def verify_variant(hub: Hub, repo_id: str, path: Path) -> dict:
    """Signature over metadata.json by a key registered for the namespace, then every file's digest."""
    meta_bytes = (path / "metadata.json").read_bytes()
    sig_path = path / "metadata.json.sig"
    namespace = repo_id.split("/", 1)[0]
    if not sig_path.is_file():
        if os.environ.get(ALLOW_UNSIGNED_ENV) != "1":
            raise Refused(
                f"unsigned: build/{path.name} has no metadata.json.sig (republish with `kernel-hub publish`, "
                f"or set {ALLOW_UNSIGNED_ENV}=1 to accept unsigned builds)"
            )
        signed_by = None
    else:
        keys = publisher_keys(hub, namespace)
        if not keys:
            raise Refused(
                f"signature cannot be checked: {hub.endpoint} lists no publisher keys for {namespace!r}"
            )
        try:
            signed_by = verify_metadata(meta_bytes, sig_path.read_text(), keys)
        except SignatureError as e:
            raise Refused(f"signature: {e}") from e
    try:
        metadata = json.loads(meta_bytes)
    except json.JSONDecodeError as e:
        raise Refused(f"metadata.json is not JSON: {e}") from e
    problems = verify_digests(path, metadata)
    if problems:
        more = f" (+{len(problems) - 3} more)" if len(problems) > 3 else ""
        raise Refused("digest mismatch: " + "; ".join(problems[:3]) + more)
    return {"signed_by": signed_by, "files": len(metadata["digest"]["files"])}


def _load_variant(hub: Hub, repo_id: str, commit: str, name: str) -> tuple[types.ModuleType, dict]:
    try:
        path = download_variant(hub, repo_id, commit, name)
    except FetchError as e:
        raise Refused(str(e)) from e
    verification = verify_variant(hub, repo_id, path)
    try:
        module = _import_from_path(path, {}, RepoInfo(repo_id=repo_id, revision=commit))
    except Exception as e:  # any import-time failure of foreign code refuses the variant
        raise Refused(f"import failed: {type(e).__name__}: {e}") from e
    return module, verification


def _package_init(path: Path, metadata: dict) -> Path:
    """`build/<v>/__init__.py` or `build/<v>/<python name>/__init__.py`, as kernels looks for it."""
    flat = path / "__init__.py"
    if flat.is_file():
        return flat
    nested = path / str(metadata.get("name", "")).replace("-", "_") / "__init__.py"
    if nested.is_file():
        return nested
    raise Refused(f"build/{path.name} has no __init__.py (checked {flat} and {nested})")


def _reference(
    module: types.ModuleType | None, metadata: dict, init_file: Path
) -> tuple[types.ModuleType, list[str]]:
    """The package's reference.py, imported on its own (the kernel's __init__ and backends never run), plus the API.

    A stand-in parent package with the real `__path__` lets reference.py use relative imports.
    """
    parent_name = f"{metadata.get('id') or 'fused_mlp'}_reference_pkg"
    if parent_name not in sys.modules:
        parent = types.ModuleType(parent_name)
        parent.__path__ = [str(init_file.parent)]
        sys.modules[parent_name] = parent
    try:
        reference = importlib.import_module(f"{parent_name}.reference")
    except Exception as e:
        raise Refused(f"reference.py cannot be imported: {type(e).__name__}: {e}") from e
    api = list(
        (metadata.get("api") or {}).get("__all__") or getattr(module, "__all__", None) or ACTIVATION_ARGS
    )
    return reference, api
