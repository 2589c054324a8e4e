"""`get_kernel`: the fastest trusted, verified, checked kernel variant for this machine, else the same API as a fallback.

Steps (docs/ARCHITECTURE.md, docs/CONTRACTS.md "Loader" and "Trust"): version -> commit (a `kernels.lock`, else
online refs, else the cache, with a warning when the hub does not answer); publisher trust (as `kernels`: the org's
`trustedKernelPublisher` or `trust_remote_code`) — an untrusted repo runs nothing, not even its fallback;
every variant decided by `resolve.resolve_variant`, the accepted ones ordered fastest first by the speed
records of this GPU arch; then one at a time: download the files this machine runs, verify the signatures
(ed25519 by a key given by the user or pinned for the namespace; a sigstore bundle against the identity
policy) and every digest (a damaged cache file is fetched once more), import under its unique `metadata.id`, check against the package's eager reference, and time
it against that reference (the speed check). The first that passes everything is returned. Otherwise
`fallback` decides: "compile" = torch.compile of the package's `reference` functions (taken from a verified
variant, CPU builds first), "eager" = those functions as they are, None = raise with the whole trace.
Every returned module carries `__kernel_info__` saying what was loaded and why. `$LOCAL_KERNELS` replaces the
hub by a folder on this machine (as in `kernels`): same resolution and checks, nothing to trust or verify.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import logging
import os
import sys
import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from registry.errors import KernelHubError, KernelLoadError
from registry.gcpause import gc_paused
from registry.spec.arch import parse_arch
from registry.spec.digest import hash_variant, mismatches
from registry.spec.signing import SignatureError
from registry.spec.variant import METADATA, SIGNATURE, SIGSTORE, build_source, cubin_target

from .check import CheckCache, CheckCrashed, CheckResult, cache_key, checked
from .fallback import ACTIVATION_ARGS, FALLBACK_MODES, build_fallback
from .fetch import (
    FetchError,
    Hub,
    commit_cached,
    download_variant,
    drop_cached,
    refetch,
    resolve_commit,
    speed_records,
    variant_metadata,
)
from .local import LOCAL_KERNELS_ENV, local_metadata, local_override, local_variants
from .lock import LockError, locked_commit
from .resolve import (
    Env,
    Resolution,
    cached_resolution,
    current_env,
    resolve_variant,
    trace_lines,
)
from .speed import SPEED_MODES, SpeedCache, SpeedCheckCrashed, SpeedResult, speed_checked
from .speed_records import parse_records, recorded_order
from .trust import (
    TrustRemoteCode,
    Untrusted,
    publisher_trust,
    user_keys,
    verify_keyless_signature,
    verify_signature,
)

ALLOW_UNSIGNED_ENV = "KERNEL_HUB_ALLOW_UNSIGNED"

# Progress at INFO (the CLI and the demo show registry.* INFO lines on stderr; a library user sees none
# unless they configure logging), refusals at INFO too: they are normal outcomes, __kernel_info__ keeps them.
log = logging.getLogger(__name__)


__all__ = ["KernelLoadError", "get_kernel"]


class Refused(KernelHubError):
    """One variant was refused after download: verification, import, check or speed check failed."""


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
) -> types.ModuleType:
    """Load `repo_id` at `version` (branch vN) or `revision`; see the module docstring for the steps.

    `backend="cpu"` makes CPU builds eligible as the kernel (as in `kernels`); by default a machine
    without a CUDA device gets the fallback with reason "no CUDA device". `speed_check=None` serves a
    kernel that passed the check even when it is slower than its fallback. `lockfile` (a `kernels.lock`)
    names the commit instead of a version lookup; `sigstore_identities` are the workflows whose keyless
    signature (metadata.json.sigstore) may vouch for a build; `$LOCAL_KERNELS` loads from a folder here.
    """
    _check_arguments(repo_id, version, fallback, check, speed_check, trust_remote_code)
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
    hub, commit, metas = load.hub, load.commit, load.metas
    where = (
        "local folder" if load.local is not None else "cache, hub offline" if hub.offline else hub.endpoint
    )
    asked = f"v{version}" if version is not None else revision or ("kernels.lock" if lockfile else "main")
    log.info(
        "%s %s -> commit %s (%s); variants to try: %s",
        repo_id,
        asked,
        commit[:12],
        where,
        ", ".join(load.order) or "none",
    )
    attempts: list[str] = []
    for name in load.order:
        known_slow = _cached_slow(load, name)
        if known_slow is not None:
            attempts.append(f"{name}: {known_slow.reason()} (cached)")
            log.info("%s: skipped, %s (cached verdict)", name, known_slow.reason())
            continue
        try:
            log.info("%s: fetching and verifying", name)
            module, verification = load_variant(load, name)
            reference, api = reference_of(module, metas[name])
            log.info("%s: checking against the eager reference on %s (check=%s)", name, load.device, check)
            result = _check(load, module, reference, api, name)
            log.info(
                "%s: check %s; speed check vs the fallback (speed_check=%s)", name, _said(result), speed_check
            )
            speed = _speed(load, module, reference, api, name)
        except Refused as e:
            attempts.append(f"{name}: {e}")
            log.info("%s: refused: %s", name, e)
            continue
        log.info("%s: serving it (speed check %s)", name, _said(speed))
        verdict = next(v for v in load.resolution.verdicts if v.variant == name)
        module.__kernel_info__ = {
            **load.info,
            "offline": hub.offline,
            "offline_reason": hub.offline_reason,
            "variant": name,
            "source": "hub" if load.local is None else "local",
            "reason": "; ".join([*attempts, f"{name}: {verdict.reason}"]),
            "check": _check_info(result, check),
            "speed": _speed_info(speed),
            "verification": verification,
            "trust": verification.pop("trust"),
            "detail": verdict.detail,
            "trace": trace_lines(load.resolution, attempts),
        }
        return module

    reason = "; ".join(attempts) if attempts else load.resolution.fallback_reason
    log.info("no kernel variant used (%s); fallback=%s", reason, fallback)
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
    order: tuple[str, ...]  # accepted variants, the order they are tried in
    env: Env
    device: str
    check: str | None
    speed_check: str | None
    cache: CheckCache
    speed_cache: SpeedCache
    keys: list[str] | None  # publisher keys the user gave (None: pinned / first use)
    info: dict  # the __kernel_info__ keys every outcome shares
    publisher: str  # how the publisher is trusted
    sigstore_identities: Sequence[str] | None = None  # keyless signers the user accepts (None: env / default)
    local: Mapping[str, Path] | None = None  # LOCAL_KERNELS: variant -> its folder (nothing verified)

    def wanted(self, relpath: str) -> bool:
        """Whether this machine runs the variant file: no build sources (csrc/), AOT cubins only of its own
        Triton version and GPU arch."""
        if build_source(relpath):
            return False
        target = cubin_target(relpath)
        if target is None:
            return True
        if self.device != "cuda" or target[0] != self.env.triton:
            return False
        return parse_arch(target[1]).same_cc(parse_arch(self.env.gpu_arch))


def _device(env: Env, backend: str | None) -> str:
    """Where the kernel is checked and runs: the GPU when there is one, unless the CPU backend was asked for."""
    return "cuda" if env.gpu_arch is not None and backend != "cpu" else "cpu"


def plan_load(
    repo_id: str,
    version: int | None,
    revision: str | None,
    *,
    check: str | None = "once",
    speed_check: str | None = "once",
    trust_remote_code: TrustRemoteCode = False,
    publisher_keys: Sequence[str] | None = None,
    sigstore_identities: Sequence[str] | None = None,
    lockfile: str | os.PathLike | None = None,
    endpoint: str | None = None,
    token: str | None = None,
    backend: str | None = None,
) -> _Load:
    """Everything before the first variant is tried: commit, publisher trust, variants, their order.

    Raises KernelLoadError when there is nothing to load, or the repo is not trusted (then not even its
    fallback runs: the fallback is the repo's own reference code).
    """
    hub = Hub.from_env(endpoint, token)
    local = local_override(repo_id)
    if local is not None:
        return _plan_local(hub, repo_id, local, check, speed_check, backend)
    if lockfile is not None and revision is not None:
        raise ValueError("pass lockfile= or revision=, not both: the lock file names the commit")
    try:
        if lockfile is not None:
            commit = locked_commit(Path(lockfile), repo_id, version)
        else:
            commit = resolve_commit(hub, repo_id, version, revision)
    except (FetchError, LockError) as e:
        raise KernelLoadError(f"{repo_id}: nothing to load and no reference to fall back to: {e}") from e
    cached = (revision is not None or lockfile is not None) and commit_cached(hub, repo_id, commit)
    try:
        publisher = publisher_trust(hub, repo_id, trust_remote_code, ask_hub=not cached)
    except Untrusted as e:
        raise KernelLoadError(
            f"{repo_id}@{commit[:12]}: refused, nothing of it runs (its fallback is its own reference code "
            f"too): {e}"
        ) from e
    try:
        metas = variant_metadata(hub, repo_id, commit)
    except FetchError as e:
        raise KernelLoadError(f"{repo_id}: nothing to load and no reference to fall back to: {e}") from e
    env = current_env()
    resolution = cached_resolution(metas, env, backend, commit, hub.own_dir("resolutions"))
    order, speedups = recorded_order(
        resolution.accepted, parse_records(speed_records(hub, repo_id, commit)), env
    )
    return _Load(
        hub=hub,
        repo_id=repo_id,
        commit=commit,
        metas=metas,
        resolution=resolution,
        order=tuple(order),
        env=env,
        device=_device(env, backend),
        check=check,
        speed_check=speed_check,
        cache=CheckCache(hub.cache),
        speed_cache=SpeedCache(hub.cache),
        keys=user_keys(publisher_keys),
        sigstore_identities=sigstore_identities,
        info={
            "repo": repo_id,
            "version": version,
            "revision": revision,
            "lockfile": str(lockfile) if lockfile is not None else None,
            "commit": commit,
            "endpoint": hub.endpoint,
            "offline": hub.offline,
            "offline_reason": hub.offline_reason,
            "order": {
                "variants": order,
                "by": "recorded speed-up over eager on this GPU arch" if speedups else "kernels' preference",
                "recorded_speedup": {v: round(s, 3) for v, s in speedups.items()},
            },
        },
        publisher=publisher,
    )


def _plan_local(
    hub: Hub,
    repo_id: str,
    path: Path,
    check: str | None,
    speed_check: str | None,
    backend: str | None,
) -> _Load:
    """A load from the folder `$LOCAL_KERNELS` names: decided and checked as hub variants, nothing verified.

    The check cache is keyed by the folder's contents (a hash of every variant's file digests).
    """
    try:
        variants = local_variants(path)
    except KernelLoadError as e:
        raise KernelLoadError(f"{repo_id}: {e}") from None
    metas = local_metadata(variants)
    content = json.dumps({v: hash_variant(d) for v, d in variants.items()}, sort_keys=True).encode()
    commit = "local-" + hashlib.sha256(content).hexdigest()[:34]
    env = current_env()
    resolution = resolve_variant(metas, env, backend=backend)
    return _Load(
        hub=hub,
        repo_id=repo_id,
        commit=commit,
        metas=metas,
        resolution=resolution,
        order=tuple(resolution.accepted),
        env=env,
        device=_device(env, backend),
        check=check,
        speed_check=speed_check,
        cache=CheckCache(hub.cache),
        speed_cache=SpeedCache(hub.cache),
        keys=None,
        info={"repo": repo_id, "version": None, "revision": None, "commit": commit, "local_path": str(path)},
        publisher=f"local ({LOCAL_KERNELS_ENV})",
        local=variants,
    )


def _fallback(load: _Load, attempts: list[str], reason: str, mode: str) -> types.ModuleType:
    """The reference package from the first verifiable variant, compiled or eager, with its check."""
    source_failures: list[str] = []
    for name in load.resolution.references:
        try:
            path, verification = _fetch_verified(load, name)
            reference, api = _reference(None, load.metas[name], _package_init(path, load.metas[name]))
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
    module_name = f"{load.metas[name].get('id') or 'fused_mlp'}_fallback"
    module = build_fallback(reference, api, mode, f"{module_name}_{mode}")
    result = None
    if mode == "compile":
        log.info("fallback-compile (reference from %s): checking torch.compile against eager", name)
        try:
            result = _check(load, module, reference, api, f"fallback-compile:{name}")
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
        "check": _check_info(result, load.check if mode == "compile" else "oracle"),
        "speed": {"status": "not needed: the fallback is the baseline"},
        "reference_variant": name,
        "verification": verification,
        "trust": verification.pop("trust"),
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


def _cached_slow(load: _Load, variant: str) -> SpeedResult | None:
    """A cached "slower than its fallback" verdict for `variant` here (then it is not even downloaded)."""
    if load.speed_check != "once":
        return None
    hit = load.speed_cache.get(cache_key(load.commit, variant, load.device))
    return hit if hit is not None and not hit.passed else None


def _speed(load: _Load, module, reference, api: list[str], variant: str) -> SpeedResult | None:
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


def _said(result: CheckResult | SpeedResult | None) -> str:
    """One word or two for a progress line: how a check or speed check ended."""
    if result is None:
        return "skipped"
    return "passed (cached)" if result.cached else "passed"


def _check_info(result: CheckResult | None, mode: str | None) -> dict:
    if mode == "oracle":
        return {"status": "not needed: the eager reference is the oracle"}
    if result is None:
        return {"status": "skipped (check=None)"}
    return {"status": _said(result), **result.to_dict()}


def _speed_info(result: SpeedResult | None) -> dict:
    if result is None:
        return {"status": "skipped (speed_check=None)"}
    return {"status": _said(result), **result.to_dict()}


class _Damaged(Refused):
    """Verification failed on files that a fresh download might repair (`paths`, variant-relative)."""

    def __init__(self, message: str, paths: list[str]):
        super().__init__(message)
        self.paths = paths


def verify_variant(load: _Load, path: Path, skipped: Sequence[str] = ()) -> dict:
    """The signature over metadata.json by a trusted key, then every file's digest; returns what was verified.

    Raises Refused for an unsigned build (unless allowed) or an untrusted key, _Damaged for a signature or
    digest that does not match the files.
    """
    meta_bytes = (path / METADATA).read_bytes()
    sig_path, bundle_path = path / SIGNATURE, path / SIGSTORE
    if not sig_path.is_file() and not bundle_path.is_file():
        if os.environ.get(ALLOW_UNSIGNED_ENV) != "1":
            raise Refused(
                f"unsigned: build/{path.name} has no {SIGNATURE} or {SIGSTORE} (republish with `kernel-hub "
                f"publish`, or set {ALLOW_UNSIGNED_ENV}=1 to accept unsigned builds)"
            )
        keys = {"key_id": None, "keys": "unsigned (allowed)", "pin_file": None}
    elif not sig_path.is_file():
        keys = {"key_id": None, "keys": None, "pin_file": None}  # the keyless signature decides below
    else:
        try:
            decision = verify_signature(
                load.hub, load.repo_id, load.commit, meta_bytes, sig_path.read_text(), load.keys
            )
        except SignatureError as e:
            raise _Damaged(f"signature: {e}", [METADATA, SIGNATURE]) from e
        except Untrusted as e:
            raise Refused(f"untrusted key: {e}") from e
        keys = {"key_id": decision.key_id, "keys": decision.how, "pin_file": decision.pin_file}
    keyless = None
    if bundle_path.is_file():
        try:
            signer = verify_keyless_signature(
                load.hub,
                load.repo_id,
                meta_bytes,
                bundle_path.read_bytes(),
                load.sigstore_identities,
                other_trusted=sig_path.is_file(),
            )
        except SignatureError as e:
            raise _Damaged(f"sigstore: {e}", [METADATA, SIGSTORE]) from e
        except Untrusted as e:
            raise Refused(f"untrusted keyless signer: {e}") from e
        keyless = {"signer": signer.signer, "repository": signer.repository, "trusted": signer.how}
        if keys["keys"] is None:
            keys = {"key_id": None, "keys": f"sigstore ({signer.how})", "pin_file": signer.pin_file}
    try:
        metadata = json.loads(meta_bytes)
    except json.JSONDecodeError as e:
        raise Refused(f"{METADATA} is not JSON: {e}") from e
    problems = mismatches(path, metadata, absent_ok=skipped)
    if METADATA in problems:
        raise Refused(problems[METADATA])
    if problems:
        lines = list(problems.values())
        more = f" (+{len(lines) - 3} more)" if len(lines) > 3 else ""
        raise _Damaged("digest mismatch: " + "; ".join(lines[:3]) + more, list(problems))
    return {
        "signed_by": keys["key_id"],
        "files": len(metadata["digest"]["files"]) - len(skipped),
        "skipped": len(skipped),
        "sigstore": keyless,
        "trust": {"publisher": load.publisher, **keys},
    }


def _fetch_verified(load: _Load, name: str) -> tuple[Path, dict]:
    """Download what this machine runs of `build/<name>` and verify it; damaged cached files are fetched once more.

    A LOCAL_KERNELS folder is the user's own: used as it is, nothing verified (as stock kernels).
    """
    if load.local is not None:
        files = (load.metas[name].get("digest") or {}).get("files") or {}
        trust = {
            "publisher": load.publisher,
            "key_id": None,
            "keys": "not verified (local files)",
            "pin_file": None,
        }
        return load.local[name], {"signed_by": None, "files": len(files), "skipped": 0, "trust": trust}
    try:
        path, skipped = download_variant(load.hub, load.repo_id, load.commit, name, load.wanted)
        return path, verify_variant(load, path, skipped)
    except FetchError as e:
        raise Refused(str(e)) from e
    except _Damaged as e:
        damaged = e
    drop_cached(path, damaged.paths)
    try:
        refetch(load.hub, load.repo_id, load.commit, name, damaged.paths)
        verification = verify_variant(load, path, skipped)
    except FetchError as e:
        raise Refused(f"{damaged} (in the cache; {e})") from e
    except _Damaged as e:
        raise Refused(f"{e} (downloaded again: the hub serves these bytes)") from e
    verification["repaired"] = sorted(damaged.paths)
    return path, verification


def load_variant(load: _Load, name: str) -> tuple[types.ModuleType, dict]:
    """Download, verify and import `build/<name>` (no check); Refused says why not."""
    path, verification = _fetch_verified(load, name)
    try:
        module = import_variant(path, load.metas[name])
    except Refused:
        raise
    except Exception as e:  # any import-time failure of foreign code refuses the variant
        raise Refused(f"import failed: {type(e).__name__}: {e}") from e
    return module, verification


_imported: dict[Path, types.ModuleType] = {}  # variant folder -> its module, as kernels keeps them


def import_variant(path: Path, metadata: dict) -> types.ModuleType:
    """Import `build/<v>` as kernels does: its __init__.py under the module name `metadata.id` (unique per build,
    so two versions coexist), once per folder per process. Our own few lines instead of kernels.importer:
    importing kernels costs ~0.2 s, most of a warm load (the module is not in kernels.get_loaded_kernels())."""
    if path in _imported:
        return _imported[path]
    name = metadata.get("id")
    if not isinstance(name, str) or not name:
        raise Refused(
            f"metadata.json of build/{path.name} has no `id` (the module name kernels uses): {name!r}"
        )
    spec = importlib.util.spec_from_file_location(name, _package_init(path, metadata))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)  # a later try imports from scratch
        raise
    _imported[path] = module
    return module


def _package_init(path: Path, metadata: dict) -> Path:
    """`build/<v>/__init__.py` or `build/<v>/<python name>/__init__.py`, as kernels looks for it."""
    flat = path / "__init__.py"
    if flat.is_file():
        return flat
    nested = path / str(metadata.get("name", "")).replace("-", "_") / "__init__.py"
    if nested.is_file():
        return nested
    raise Refused(f"build/{path.name} has no __init__.py (checked {flat} and {nested})")


def reference_of(module: types.ModuleType, metadata: dict) -> tuple[types.ModuleType, list[str]]:
    """The loaded variant's own reference module and public API."""
    return _reference(module, metadata, Path(module.__file__))


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
