"""Hub and cache I/O for the loader: version -> commit, variant metadata, one variant's files, publisher keys.

Everything goes through huggingface_hub (any HF-API hub: ours or the real one) into the standard HF
cache, so stock `kernels` and we share downloads. Offline (`HF_HUB_OFFLINE=1`) nothing touches the
network: versions come from the cache's `refs/vN` (which we write on every online resolution, since the
HF client writes refs only for downloads made by branch name) or from the newest cached snapshot of
that version, and a variant is read straight from its snapshot folder (stock `kernels` fails here:
docs/HUB_PROTOCOL.md §8). Environment variables are read at call time, not import time.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urlsplit

from httpx2 import HTTPError
from huggingface_hub import HfApi, constants, hf_hub_download, snapshot_download
from huggingface_hub.file_download import repo_folder_name
from huggingface_hub.hf_api import RepoFolder
from huggingface_hub.utils import build_hf_headers, get_session

from registry.atomic import write_atomic
from registry.errors import KernelHubError
from registry.spec.names import COMMIT, KERNEL_REPO_TYPE, versions

# HfHubHTTPError derives from httpx2.HTTPError, as do connection errors: catching it covers both.
REPO_TYPE = KERNEL_REPO_TYPE
BYTECODE = ["*.pyc", "**/__pycache__/**"]


class FetchError(KernelHubError, RuntimeError):
    """The hub or the cache could not give what was asked for; the message says what to do."""


@dataclass(frozen=True)
class Hub:
    """Where to read from: endpoint, token, offline flag and cache folder, fixed for one get_kernel call."""

    endpoint: str
    token: str | None
    offline: bool
    cache: Path

    @classmethod
    def from_env(cls, endpoint: str | None = None, token: str | None = None) -> Hub:
        endpoint = (endpoint or os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")
        offline = os.environ.get("HF_HUB_OFFLINE", "").upper() in {"1", "ON", "YES", "TRUE"}
        cache = os.environ.get("KERNELS_CACHE") or os.environ.get("HF_HUB_CACHE") or constants.HF_HUB_CACHE
        return cls(endpoint, token, offline, Path(cache))

    @property
    def api(self) -> HfApi:
        return HfApi(endpoint=self.endpoint, token=self.token)

    def repo_dir(self, repo_id: str) -> Path:
        return self.cache / repo_folder_name(repo_id=repo_id, repo_type=REPO_TYPE)


def pick_version(branches: Mapping[str, str], version: int) -> str:
    """Commit of branch `v<version>` among `branches` (name -> commit); only strict `v(0|[1-9]\\d*)` names count."""
    found = versions(dict(branches))
    if version not in found:
        have = ", ".join(f"v{v}" for v in sorted(found)) or "none"
        raise FetchError(f"version {version} does not exist (versions on this repo: {have})")
    return found[version]


def resolve_commit(hub: Hub, repo_id: str, version: int | None, revision: str | None) -> str:
    """The 40-hex commit that `version` (branch vN) or `revision` (branch, tag or commit) names."""
    if (version is None) == (revision is None):
        raise ValueError(
            "pass exactly one of version=<N> (the v<N> branch) or revision=<branch, tag or commit>"
        )
    if revision is not None and COMMIT.fullmatch(revision):
        return revision
    ref = f"v{version}" if version is not None else revision
    if hub.offline:
        return _cached_commit(hub, repo_id, ref, version)
    try:
        if version is not None:
            refs = hub.api.list_repo_refs(repo_id, repo_type=REPO_TYPE)
            commit = pick_version({b.name: b.target_commit for b in refs.branches}, version)
        else:
            commit = hub.api.repo_info(repo_id, repo_type=REPO_TYPE, revision=revision).sha
    except (HTTPError, OSError) as e:
        raise FetchError(f"cannot resolve {repo_id}@{ref} on {hub.endpoint}: {e}") from e
    write_atomic(hub.repo_dir(repo_id) / "refs" / ref, commit.encode())
    return commit


def _cached_commit(hub: Hub, repo_id: str, ref: str, version: int | None) -> str:
    repo_dir = hub.repo_dir(repo_id)
    ref_file = repo_dir / "refs" / ref
    if ref_file.is_file():
        return ref_file.read_text().strip()
    if version is not None:
        newest = _newest_snapshot_of_version(repo_dir, version)
        if newest is not None:
            return newest
    raise FetchError(
        f"offline (HF_HUB_OFFLINE=1) and {repo_id}@{ref} is not in the cache {hub.cache}: load it once online "
        "with the same KERNELS_CACHE / HF_HUB_CACHE, or pass revision=<40-hex commit> of a cached snapshot"
    )


def _newest_snapshot_of_version(repo_dir: Path, version: int) -> str | None:
    """The most recently written cached snapshot whose variants declare metadata `version` == `version`."""
    found: list[tuple[float, str]] = []
    for meta in (repo_dir / "snapshots").glob("*/build/*/metadata.json"):
        try:
            if json.loads(meta.read_text()).get("version") == version:
                found.append((meta.stat().st_mtime, meta.parents[2].name))
        except (OSError, json.JSONDecodeError):
            continue
    return max(found)[1] if found else None


def variant_metadata(hub: Hub, repo_id: str, commit: str) -> dict[str, dict]:
    """Every variant under `build/` at `commit` with its metadata.json ({} when it has none or it is unreadable)."""
    if hub.offline:
        snapshot = hub.repo_dir(repo_id) / "snapshots" / commit / "build"
        return {d.name: _read_json(d / "metadata.json") for d in sorted(snapshot.glob("*")) if d.is_dir()}
    try:
        tree = hub.api.list_repo_tree(repo_id, "build", repo_type=REPO_TYPE, revision=commit)
        names = sorted(item.path.split("/")[-1] for item in tree if isinstance(item, RepoFolder))
    except (HTTPError, OSError) as e:
        raise FetchError(
            f"cannot list build variants of {repo_id}@{commit[:12]} on {hub.endpoint}: {e}"
        ) from e
    metas = {}
    for name in names:
        try:
            path = hf_hub_download(
                repo_id,
                f"build/{name}/metadata.json",
                repo_type=REPO_TYPE,
                revision=commit,
                cache_dir=hub.cache,
                endpoint=hub.endpoint,
                token=hub.token,
            )
            metas[name] = _read_json(Path(path))
        except (HTTPError, OSError):
            metas[name] = {}
    return metas


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def download_variant(hub: Hub, repo_id: str, commit: str, variant: str) -> Path:
    """The local folder of `build/<variant>` at `commit`, downloading only that variant (never bytecode)."""
    if not hub.offline:
        try:
            snapshot_download(
                repo_id,
                repo_type=REPO_TYPE,
                revision=commit,
                allow_patterns=[f"build/{variant}/*"],
                ignore_patterns=BYTECODE,
                cache_dir=hub.cache,
                endpoint=hub.endpoint,
                token=hub.token,
            )
        except (HTTPError, OSError) as e:
            raise FetchError(f"download of {repo_id}@{commit[:12]} build/{variant} failed: {e}") from e
    path = hub.repo_dir(repo_id) / "snapshots" / commit / "build" / variant
    listed = (
        ((_read_json(path / "metadata.json").get("digest") or {}).get("files") or {}) if path.is_dir() else {}
    )
    missing = [f for f in listed if not (path / f).is_file()]
    if not path.is_dir() or missing:
        what = (
            f"only partly in the cache ({len(missing)} files missing)"
            if path.is_dir()
            else "not in the cache"
        )
        raise FetchError(
            f"build/{variant} of {repo_id}@{commit[:12]} is {what} {hub.cache} and HF_HUB_OFFLINE=1: "
            "load it once online first"
        )
    return path


def publisher_keys(hub: Hub, namespace: str) -> list[str]:
    """Ed25519 keys (base64) the hub lists for `namespace`; cached per endpoint for offline use.

    A hub without the kernel-hub key API (404) has no keys, so signed variants cannot be verified there.
    """
    host = urlsplit(hub.endpoint).netloc.replace(":", "_") or "default"
    cached = hub.cache / "kernel-hub" / "keys" / host / f"{namespace}.json"
    if not hub.offline:
        url = f"{hub.endpoint}/api/kernel-hub/keys/{quote(namespace, safe='')}"
        try:
            response = get_session().get(url, headers=build_hf_headers(token=hub.token))
        except (HTTPError, OSError):
            response = None
        if response is not None and response.status_code == 404:
            return []
        if response is not None and response.status_code == 200:
            keys = [k["public_key"] for k in response.json().get("keys", [])]
            write_atomic(cached, json.dumps(keys).encode())
            return keys
    try:
        return list(json.loads(cached.read_text()))
    except (OSError, json.JSONDecodeError):
        return []
