"""Hub and cache I/O for the loader: version -> commit, variant metadata, the files of one variant, speed records.

Files land in the standard HF cache layout (`blobs/<etag>`, `snapshots/<commit>/<path>` -> blob, `refs/<ref>`),
so stock `kernels` and we share downloads. A variant's files are fetched one GET each from the list in its
(signed) metadata.json, never by a recursive tree listing and without the per-file HEAD that
`hf_hub_download` makes: a cold load is a few dozen requests, and files this machine does not run (the
cubin bundles of other GPU archs) are not fetched at all. Everything a commit needs is cached per commit
(commits never change), so a load of a cached commit makes no request.

Offline (`HF_HUB_OFFLINE=1`), or once a request finds the hub unreachable (connection refused, timeout,
502/503/504), the rest of the call reads the cache only: versions come from `refs/vN` (which we write on
every online resolution) or the newest cached snapshot of that version, with a warning naming the
failure, as huggingface_hub does. Environment variables are read at call time, not import time.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import warnings
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from httpx2 import HTTPError, TransportError
from huggingface_hub import constants as hf_constants
from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled

from registry import constants
from registry.atomic import write_atomic
from registry.errors import KernelHubError
from registry.spec.names import COMPAT_BRANCH, is_commit
from registry.spec.variant import METADATA, SIGNATURE, SIGSTORE, metadata_path
from registry.wire import REPO_TYPE, HubClient, VersionNotFound, resolve_endpoint

from .speed_records import SPEED_DIR

log = logging.getLogger(__name__)

UNREACHABLE_STATUS = frozenset({502, 503, 504})
_WORKERS = 8


class FetchError(KernelHubError, RuntimeError):
    """The hub or the cache could not give what was asked for; the message says what to do."""


class HubUnreachable(FetchError):
    """No answer from the hub (connection refused, timeout, gateway error): the call goes on from the cache."""


def unreachable_reason(error: BaseException) -> str | None:
    """Why `error` means "no hub to talk to" (as opposed to an answer such as 401 or 404), else None."""
    if isinstance(error, (TransportError, OfflineModeIsEnabled, ConnectionError)):
        return f"{type(error).__name__}: {error}"
    status = (
        error.response.status_code if isinstance(error, HfHubHTTPError) and error.response is not None else 0
    )
    if status in UNREACHABLE_STATUS:
        return f"HTTP {status}"
    return None


@dataclass
class Hub(HubClient):
    """Where to read from for one get_kernel call: the hub on the wire, the cache, and whether the hub answers.

    `unreachable` is set by the first request that gets no answer; from then on the call is offline.
    """

    offline_env: bool
    cache: Path
    unreachable: str | None = None

    @classmethod
    def from_env(cls, endpoint: str | None = None, token: str | None = None) -> Hub:
        cache = constants.kernels_cache() or hf_constants.HF_HUB_CACHE
        return cls(resolve_endpoint(endpoint), token, constants.hf_hub_offline(), Path(cache))

    @property
    def offline(self) -> bool:
        return self.offline_env or self.unreachable is not None

    @property
    def offline_reason(self) -> str | None:
        if self.offline_env:
            return "offline (HF_HUB_OFFLINE=1)"
        return f"{self.endpoint} is unreachable ({self.unreachable})" if self.unreachable else None

    @property
    def host(self) -> str:
        """The endpoint as a folder name (`127.0.0.1_8000`): per-hub state such as pinned keys lives under it."""
        return urlsplit(self.endpoint).netloc.replace(":", "_") or "default"

    def repo_dir(self, repo_id: str) -> Path:
        return self.cache / repo_folder(repo_id)

    def own_dir(self, *parts: str) -> Path:
        """kernel-hub's own state in the cache (`<cache>/kernel-hub/...`)."""
        return self.cache.joinpath("kernel-hub", *parts)

    def request(self, what: str, fn: Callable, *args, **kwargs):
        """Run one hub call; no answer marks the hub unreachable (with a warning) and raises HubUnreachable."""
        if self.offline:
            raise HubUnreachable(f"{what}: {self.offline_reason}")
        try:
            return fn(*args, **kwargs)
        except (HTTPError, OSError) as e:
            why = unreachable_reason(e)
            if why is None:
                raise
            self.unreachable = why
            warnings.warn(
                f"kernel-hub: {self.endpoint} is unreachable ({why}); using the cache {self.cache}",
                stacklevel=4,
            )
            raise HubUnreachable(f"{what}: {self.offline_reason}") from e


def repo_folder(repo_id: str) -> str:
    """The repo's folder name in the HF cache (`kernels--acme--fused-mlp`), as huggingface_hub's
    `repo_folder_name` writes it; here so a cached load need not import huggingface_hub.file_download."""
    return "--".join([f"{REPO_TYPE}s", *repo_id.split("/")])


def said(error: BaseException) -> str:
    """An HTTP error in one line: the status and the hub's own message (huggingface_hub's str() of a 404 is
    ~600 characters of advice about the Hugging Face website); other errors as they are."""
    if isinstance(error, HfHubHTTPError) and error.response is not None:
        r = error.response
        message = r.headers.get("X-Error-Message")
        if not message:  # a hub that does not say why: huggingface_hub's text is about its own website
            message = (error.server_message or "").strip().split("\n")[0] or r.reason_phrase
            if r.status_code in (401, 404):
                message += " (no such repo, or it is private: pass a token)"
        return f"{r.status_code} {' '.join(message.split())[:300]}"
    return " ".join(str(error).split())[:300]


def token_advice(error: BaseException) -> str:
    """What to do about an HTTP 401/403 answer (the token), else ""."""
    status = (
        error.response.status_code if isinstance(error, HfHubHTTPError) and error.response is not None else 0
    )
    return "; check HF_TOKEN / token=: the hub does not accept it" if status in (401, 403) else ""


def resolve_commit(hub: Hub, repo_id: str, version: int | None, revision: str | None) -> str:
    """The 40-hex commit that `version` (branch vN) or `revision` (branch, tag or commit) names."""
    if (version is None) == (revision is None):
        raise ValueError(
            "pass exactly one of version=<N> (the v<N> branch) or revision=<branch, tag or commit>"
        )
    if revision is not None and is_commit(revision):
        return revision
    ref = f"v{version}" if version is not None else revision
    if not hub.offline:
        try:
            if version is not None:
                commit = hub.request(f"list the versions of {repo_id}", hub.version_commit, repo_id, version)
            else:
                commit = hub.request(f"resolve {repo_id}@{revision}", hub.revision_commit, repo_id, revision)
        except HubUnreachable:
            pass
        except VersionNotFound as e:
            raise FetchError(f"version {version} does not exist (versions on this repo: {e.have})") from None
        except (HTTPError, OSError) as e:
            raise FetchError(
                f"cannot resolve {repo_id}@{ref} on {hub.endpoint}: {said(e)}{token_advice(e)}"
            ) from e
        else:
            write_atomic(hub.repo_dir(repo_id) / "refs" / ref, commit.encode())
            return commit
    return _cached_commit(hub, repo_id, ref, version)


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
        f"{hub.offline_reason} and {repo_id}@{ref} is not in the cache {hub.cache}: load it once online "
        "with the same KERNELS_CACHE / HF_HUB_CACHE, or pass revision=<40-hex commit> of a cached snapshot"
    )


def _newest_snapshot_of_version(repo_dir: Path, version: int) -> str | None:
    """The most recently written cached snapshot whose variants declare metadata `version` == `version`."""
    found: list[tuple[float, str]] = []
    for meta in (repo_dir / "snapshots").glob(f"*/build/*/{METADATA}"):
        try:
            if json.loads(meta.read_text()).get("version") == version:
                found.append((meta.stat().st_mtime, meta.parents[2].name))
        except (OSError, json.JSONDecodeError):
            continue
    return max(found)[1] if found else None


def _listing_file(hub: Hub, repo_id: str, commit: str) -> Path:
    return hub.own_dir("commits", repo_folder(repo_id), f"{commit}.json")


def commit_cached(hub: Hub, repo_id: str, commit: str) -> bool:
    """Whether an earlier load listed this commit's variants (then loading it again needs no hub request)."""
    return _listing_file(hub, repo_id, commit).is_file()


def variant_metadata(hub: Hub, repo_id: str, commit: str) -> dict[str, dict]:
    """Every variant under `build/` at `commit` with its metadata.json ({} when it has none or it is unreadable).

    The first load of a commit lists `build/`, fetches every metadata.json and the commit's speed records,
    and remembers the list; later loads read it all from the cache.
    """
    listing = _listing_file(hub, repo_id, commit)
    snapshot = hub.repo_dir(repo_id) / "snapshots" / commit
    if listing.is_file():
        names = json.loads(listing.read_text())["variants"]
        if all((snapshot / metadata_path(n)).is_file() for n in names):
            return {n: _read_json(snapshot / metadata_path(n)) for n in names}
    if not hub.offline:
        try:
            names = hub.request(
                f"list the variants of {repo_id}@{commit[:12]}", hub.folder_names, repo_id, "build", commit
            )
            fetch_files(hub, repo_id, commit, [metadata_path(n) for n in names], optional=True)
            _fetch_speed_records(hub, repo_id, commit)
        except HubUnreachable:
            pass
        except (HTTPError, OSError) as e:
            raise FetchError(
                f"cannot list build variants of {repo_id}@{commit[:12]} on {hub.endpoint}: {said(e)}{token_advice(e)}"
            ) from e
        else:
            write_atomic(listing, json.dumps({"variants": names}).encode())
            return {n: _read_json(snapshot / metadata_path(n)) for n in names}
    return {d.name: _read_json(d / METADATA) for d in sorted((snapshot / "build").glob("*")) if d.is_dir()}


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def _etag(response) -> str | None:
    """The blob name huggingface_hub would use: the first response's X-Linked-Etag (LFS) or ETag, unquoted."""
    first = response.history[0] if response.history else response
    raw = first.headers.get("X-Linked-Etag") or first.headers.get("ETag")
    if not raw:
        return None
    tag = raw.removeprefix("W/").strip('"')
    return tag if re.fullmatch(r"[0-9A-Za-z._-]+", tag) else None


def _fetch_one(hub: Hub, repo_id: str, commit: str, path: str, optional: bool) -> bool:
    """GET one file at `commit` into the cache (blob + snapshot link); False when `optional` and it is absent."""
    url = hub.file_url(repo_id, path, commit)
    try:
        response = hub.request(f"download {path}", hub.get, url, follow_redirects=True)
    except HfHubHTTPError as e:
        if optional and e.response is not None and e.response.status_code == 404:
            return False
        raise
    data = response.content
    storage = hub.repo_dir(repo_id)
    blob = storage / "blobs" / (_etag(response) or hashlib.sha256(data).hexdigest())
    if not blob.is_file() or blob.stat().st_size != len(data):
        write_atomic(blob, data)
    _link(blob, storage / "snapshots" / commit / path)
    return True


def _link(blob: Path, pointer: Path) -> None:
    """Point the snapshot path at its blob (relative symlink, as huggingface_hub does; a copy where links fail)."""
    pointer.parent.mkdir(parents=True, exist_ok=True)
    tmp = pointer.with_name(f".{pointer.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    try:
        os.symlink(os.path.relpath(blob, pointer.parent), tmp)
    except OSError:
        tmp.write_bytes(blob.read_bytes())
    os.replace(tmp, pointer)


def fetch_files(
    hub: Hub, repo_id: str, commit: str, paths: Iterable[str], *, optional: bool = False
) -> list[str]:
    """Download the repo `paths` at `commit` that the cache lacks (one GET each, in parallel); returns absent ones.

    `optional`: a 404 means the file does not exist (returned) instead of an error.
    """
    snapshot = hub.repo_dir(repo_id) / "snapshots" / commit
    todo = [p for p in paths if not (snapshot / p).is_file()]
    if not todo:
        return []
    with ThreadPoolExecutor(max_workers=min(_WORKERS, len(todo))) as pool:
        found = list(pool.map(lambda p: _fetch_one(hub, repo_id, commit, p, optional), todo))
    return [p for p, ok in zip(todo, found) if not ok]


def download_variant(
    hub: Hub, repo_id: str, commit: str, variant: str, wanted: Callable[[str], bool] = lambda _: True
) -> tuple[Path, list[str]]:
    """(local folder of `build/<variant>` at `commit`, digest paths left out because `wanted` said no).

    The file list is the variant's metadata.json digest (plus its signatures, .sig and .sigstore, where present);
    bytecode is never listed.
    """
    path = hub.repo_dir(repo_id) / "snapshots" / commit / "build" / variant
    where = f"build/{variant} of {repo_id}@{commit[:12]}"
    if not (path / METADATA).is_file():  # variant_metadata fetched every metadata.json the hub has
        if hub.offline:
            raise FetchError(
                f"{where} is not in the cache {hub.cache} and {hub.offline_reason}: load it once online"
            )
        raise FetchError(f"{where} has no {METADATA}: it cannot be verified")
    listed = list((_read_json(path / METADATA).get("digest") or {}).get("files") or {})
    skipped = [f for f in listed if not wanted(f)]
    missing = [f for f in listed if wanted(f) and not (path / f).is_file()]
    if missing and hub.offline:
        raise FetchError(
            f"{where} is only partly in the cache {hub.cache} ({len(missing)} files missing) and "
            f"{hub.offline_reason}: load it once online first"
        )
    if missing:
        prefix = f"build/{variant}/"
        try:
            fetch_files(hub, repo_id, commit, [prefix + f for f in missing])
            fetch_files(hub, repo_id, commit, [prefix + SIGNATURE, prefix + SIGSTORE], optional=True)
        except (HubUnreachable, HTTPError, OSError) as e:
            raise FetchError(f"download of {where} failed: {e}") from e
    return path, skipped


def drop_cached(variant_dir: Path, relpaths: Iterable[str]) -> None:
    """Forget damaged cached files of a variant: the snapshot link and the blob behind it."""
    for rel in relpaths:
        pointer = variant_dir / rel
        blob = pointer.resolve() if pointer.is_symlink() else None
        pointer.unlink(missing_ok=True)
        if blob is not None and blob.parent.name == "blobs":
            blob.unlink(missing_ok=True)


def refetch(hub: Hub, repo_id: str, commit: str, variant: str, relpaths: list[str]) -> None:
    """Download `relpaths` of `build/<variant>` again after `drop_cached` (raises FetchError offline)."""
    if hub.offline:
        raise FetchError(f"cannot download them again: {hub.offline_reason}")
    try:
        fetch_files(hub, repo_id, commit, [f"build/{variant}/{r}" for r in relpaths])
    except (HTTPError, OSError) as e:
        raise FetchError(f"downloading them again failed: {e}") from e


def _speed_dir(hub: Hub, repo_id: str, commit: str) -> Path:
    return hub.own_dir("speed", repo_folder(repo_id), commit)


def _fetch_speed_records(hub: Hub, repo_id: str, commit: str) -> None:
    """Copy the commit's speed records from the `compat` branch into the cache (none: nothing to do)."""
    try:
        files = hub.request(
            f"list speed records of {repo_id}@{commit[:12]}",
            hub.file_paths,
            repo_id,
            f"{SPEED_DIR}/{commit}",
            COMPAT_BRANCH,
            ".json",
        )
    except HfHubHTTPError as e:  # no compat branch or no records for this commit
        if e.response is not None and e.response.status_code == 404:
            return
        raise
    for path in files:
        url = hub.file_url(repo_id, path, COMPAT_BRANCH)
        body = hub.request(f"download {path}", hub.get, url, follow_redirects=True).content
        keep_speed_record(hub, repo_id, commit, path.rsplit("/", 1)[-1], body)


def keep_speed_record(hub: Hub, repo_id: str, commit: str, name: str, body: bytes) -> None:
    """Store a speed record of `commit` in the cache (fetched with the commit, or just measured here)."""
    write_atomic(_speed_dir(hub, repo_id, commit) / name, body)


def speed_records(hub: Hub, repo_id: str, commit: str) -> list[dict]:
    """The commit's speed records as fetched with its variant list (raw JSON; unreadable files skipped)."""
    folder = _speed_dir(hub, repo_id, commit)
    return [r for r in (_read_json(p) for p in sorted(folder.glob("*.json"))) if r]
