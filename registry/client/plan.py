"""What one `get_kernel` call settles before it tries a variant: the commit, the publisher's trust, the
variants that fit here and the order they are tried in (`plan_load` -> `Load`).

Version -> commit comes from a `kernels.lock`, else the hub's refs, else the cache (with a warning when the
hub does not answer); trust is checked as `kernels` does (the org's `trustedKernelPublisher` or
`trust_remote_code`): an untrusted repo runs nothing, not even its fallback. `$LOCAL_KERNELS` replaces the
hub by a folder on this machine: same resolution, nothing to trust or verify.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from registry import constants
from registry.errors import KernelHubError, KernelLoadError
from registry.spec.arch import parse_arch
from registry.spec.digest import hash_variant
from registry.spec.variant import build_source, cubin_target

from .check import CheckCache
from .fetch import FetchError, Hub, commit_cached, resolve_commit, speed_records, variant_metadata
from .local import local_metadata, local_override, local_variants
from .lock import LockError, locked_commit
from .resolve import Env, Resolution, cached_resolution, current_env, resolve_variant
from .speed import SpeedCache
from .speed_records import parse_records, recorded_order
from .trust import TrustRemoteCode, Untrusted, publisher_trust, user_keys


class Refused(KernelHubError):
    """One variant was refused after download: verification, import, check or speed check failed."""


@dataclass(frozen=True)
class Load:
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
) -> Load:
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
    return Load(
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
) -> Load:
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
    return Load(
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
        publisher=f"local ({constants.LOCAL_KERNELS})",
        local=variants,
    )
