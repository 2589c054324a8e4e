"""Hub I/O for the matrix: a version's commit and variant metadata, check and speed records on `compat`.

Speaks only the Hugging Face Hub API through `huggingface_hub`, so it works against our hub and the
real Hub alike. Everything that decides lives in the pure modules; this file only moves bytes.
"""

from __future__ import annotations

import json
from pathlib import Path

from huggingface_hub import CommitOperationAdd, HfApi, RepoFolder
from huggingface_hub.errors import EntryNotFoundError, RevisionNotFoundError

from registry.client.speed_records import (
    SPEED_DIR,
    SpeedRecord,
    SpeedRecordError,
    parse_speed_record,
    speed_record_path,
)
from registry.errors import KernelHubError
from registry.spec.names import COMPAT_BRANCH, KERNEL_REPO_TYPE
from registry.spec.names import versions as version_heads

from .records import CheckRecord, RecordError, commit_dir, parse_record, record_path

REPO_TYPE = KERNEL_REPO_TYPE


class MatrixSourceError(KernelHubError, RuntimeError):
    """The hub does not have what the matrix needs (version, variants); the message says what to do."""

    exit_code = 2  # `kernel-hub matrix`: a source error


def version_commit(api: HfApi, repo: str, version: int) -> str:
    """Head commit of branch `v<version>`; raises MatrixSourceError listing the versions that exist."""
    found = versions(api, repo)
    if version not in found:
        have = ", ".join(f"v{n}" for n in sorted(found)) or "none"
        raise MatrixSourceError(f"{repo} has no version {version} (branch v{version}); versions: {have}")
    return found[version]


def versions(api: HfApi, repo: str) -> dict[int, str]:
    """Every canonical version branch `vN` -> its head commit (`v01` is not a version: spec.names)."""
    refs = api.list_repo_refs(repo, repo_type=REPO_TYPE)
    return version_heads({b.name: b.target_commit for b in refs.branches})


def _read_json(api: HfApi, repo: str, path: str, revision: str, cache_dir: Path | None) -> dict:
    local = api.hf_hub_download(repo, path, repo_type=REPO_TYPE, revision=revision, cache_dir=cache_dir)
    return json.loads(Path(local).read_text())


def variant_metadata(api: HfApi, repo: str, commit: str, cache_dir: Path | None = None) -> dict[str, dict]:
    """name -> metadata.json of every variant under `build/` at `commit` (only metadata is downloaded)."""
    try:
        entries = api.list_repo_tree(repo, path_in_repo="build", revision=commit, repo_type=REPO_TYPE)
    except EntryNotFoundError:
        raise MatrixSourceError(
            f"{repo}@{commit[:12]} has no build/ folder: publish variants with `kernel-hub publish`"
        ) from None
    names = sorted(e.path.split("/", 1)[1] for e in entries if isinstance(e, RepoFolder))
    return {n: _read_json(api, repo, f"build/{n}/metadata.json", commit, cache_dir) for n in names}


def check_records(api: HfApi, repo: str, commit: str, cache_dir: Path | None = None) -> list[CheckRecord]:
    """Every check recorded on the `compat` branch for `commit`; none when the branch or folder is absent."""
    try:
        entries = api.list_repo_tree(
            repo, path_in_repo=commit_dir(commit), revision=COMPAT_BRANCH, repo_type=REPO_TYPE
        )
        paths = sorted(e.path for e in entries if e.path.endswith(".json"))
    except (EntryNotFoundError, RevisionNotFoundError):
        return []
    records = []
    for path in paths:
        try:
            records.append(parse_record(_read_json(api, repo, path, COMPAT_BRANCH, cache_dir)))
        except RecordError as e:
            raise RecordError(f"{repo}@{COMPAT_BRANCH}:{path}: {e}") from None
    return records


def speed_records(api: HfApi, repo: str, commit: str, cache_dir: Path | None = None) -> list[SpeedRecord]:
    """Every `kernel-hub bench` record on `compat` for `commit`; none when the branch or folder is absent."""
    try:
        entries = api.list_repo_tree(
            repo, path_in_repo=f"{SPEED_DIR}/{commit}", revision=COMPAT_BRANCH, repo_type=REPO_TYPE
        )
        paths = sorted(e.path for e in entries if e.path.endswith(".json"))
    except (EntryNotFoundError, RevisionNotFoundError):
        return []
    out = []
    for path in paths:
        try:
            out.append(parse_speed_record(_read_json(api, repo, path, COMPAT_BRANCH, cache_dir)))
        except SpeedRecordError as e:
            raise SpeedRecordError(f"{repo}@{COMPAT_BRANCH}:{path}: {e}") from None
    return out


def _commit_to_compat(api: HfApi, repo: str, path: str, data: dict, message: str) -> str:
    """Commit one JSON file on `compat` (created from `main` if missing); returns the commit URL."""
    branches = {b.name for b in api.list_repo_refs(repo, repo_type=REPO_TYPE).branches}
    if COMPAT_BRANCH not in branches:
        api.create_branch(repo, branch=COMPAT_BRANCH, repo_type=REPO_TYPE, exist_ok=True)
    body = json.dumps(data, indent=2, sort_keys=True).encode() + b"\n"
    info = api.create_commit(
        repo,
        operations=[CommitOperationAdd(path, body)],
        commit_message=message,
        revision=COMPAT_BRANCH,
        repo_type=REPO_TYPE,
    )
    return info.commit_url


def write_record(api: HfApi, repo: str, record: CheckRecord) -> str:
    """Commit the record as `checks/<commit>/<fingerprint>.json` on `compat`; returns the commit URL.

    Runners of different machines write different files, so their commits never conflict; a re-run on
    the same machine replaces its own file.
    """
    return _commit_to_compat(
        api,
        repo,
        record_path(record.commit, record.fingerprint),
        record.to_json(),
        f"compat: v{record.version} {record.commit[:12]} on {record.fingerprint}: "
        + ("pass" if record.passed else "FAIL"),
    )


def write_speed_record(api: HfApi, repo: str, record: SpeedRecord) -> str:
    """Commit the record as `speed/<commit>/<fingerprint>.json` on `compat` (a re-run replaces it); the commit URL."""
    return _commit_to_compat(
        api,
        repo,
        speed_record_path(record.commit, record.env),
        record.to_json(),
        f"speed: v{record.version} {record.commit[:12]} on {record.fingerprint} ({record.device})",
    )
