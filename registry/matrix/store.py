"""Hub I/O for the matrix: a version's commit and variant metadata, check and speed records on `compat`.

Speaks only the Hugging Face Hub API through the wire client (`registry/wire.py`), so it works against our
hub and the real Hub alike. Everything that decides lives in the pure modules; this file only moves bytes.
"""

from __future__ import annotations

import json
from pathlib import Path

from huggingface_hub import CommitOperationAdd
from huggingface_hub.errors import EntryNotFoundError, RevisionNotFoundError

from registry.client.speed_records import (
    SPEED_DIR,
    SpeedRecord,
    SpeedRecordError,
    parse_speed_record,
    speed_record_path,
)
from registry.errors import KernelHubError
from registry.spec.names import COMPAT_BRANCH
from registry.wire import REPO_TYPE, HubClient, VersionNotFound

from .records import CheckRecord, RecordError, commit_dir, parse_record, record_path


class MatrixSourceError(KernelHubError, RuntimeError):
    """The hub does not have what the matrix needs (version, variants); the message says what to do."""

    exit_code = 2  # `kernel-hub matrix`: a source error


def version_commit(client: HubClient, repo: str, version: int) -> str:
    """Head commit of branch `v<version>`; raises MatrixSourceError listing the versions that exist."""
    try:
        return client.version_commit(repo, version)
    except VersionNotFound as e:
        raise MatrixSourceError(str(e)) from None


def _read_json(client: HubClient, repo: str, path: str, revision: str, cache_dir: Path | None) -> dict:
    return json.loads(client.download(repo, path, revision, cache_dir).read_text())


def variant_metadata(
    client: HubClient, repo: str, commit: str, cache_dir: Path | None = None
) -> dict[str, dict]:
    """name -> metadata.json of every variant under `build/` at `commit` (only metadata is downloaded)."""
    try:
        names = client.folder_names(repo, "build", commit)
    except EntryNotFoundError:
        raise MatrixSourceError(
            f"{repo}@{commit[:12]} has no build/ folder: publish variants with `kernel-hub publish`"
        ) from None
    return {n: _read_json(client, repo, f"build/{n}/metadata.json", commit, cache_dir) for n in names}


def check_records(
    client: HubClient, repo: str, commit: str, cache_dir: Path | None = None
) -> list[CheckRecord]:
    """Every check recorded on the `compat` branch for `commit`; none when the branch or folder is absent."""
    try:
        paths = client.file_paths(repo, commit_dir(commit), COMPAT_BRANCH, ".json")
    except (EntryNotFoundError, RevisionNotFoundError):
        return []
    records = []
    for path in paths:
        try:
            records.append(parse_record(_read_json(client, repo, path, COMPAT_BRANCH, cache_dir)))
        except RecordError as e:
            raise RecordError(f"{repo}@{COMPAT_BRANCH}:{path}: {e}") from None
    return records


def speed_records(
    client: HubClient, repo: str, commit: str, cache_dir: Path | None = None
) -> list[SpeedRecord]:
    """Every `kernel-hub bench` record on `compat` for `commit`; none when the branch or folder is absent."""
    try:
        paths = client.file_paths(repo, f"{SPEED_DIR}/{commit}", COMPAT_BRANCH, ".json")
    except (EntryNotFoundError, RevisionNotFoundError):
        return []
    out = []
    for path in paths:
        try:
            out.append(parse_speed_record(_read_json(client, repo, path, COMPAT_BRANCH, cache_dir)))
        except SpeedRecordError as e:
            raise SpeedRecordError(f"{repo}@{COMPAT_BRANCH}:{path}: {e}") from None
    return out


def _commit_to_compat(client: HubClient, repo: str, path: str, data: dict, message: str) -> str:
    """Commit one JSON file on `compat` (created from `main` if missing); returns the commit URL."""
    if COMPAT_BRANCH not in client.branch_heads(repo):
        client.api.create_branch(repo, branch=COMPAT_BRANCH, repo_type=REPO_TYPE, exist_ok=True)
    body = json.dumps(data, indent=2, sort_keys=True).encode() + b"\n"
    info = client.api.create_commit(
        repo,
        operations=[CommitOperationAdd(path, body)],
        commit_message=message,
        revision=COMPAT_BRANCH,
        repo_type=REPO_TYPE,
    )
    return info.commit_url


def write_record(client: HubClient, repo: str, record: CheckRecord) -> str:
    """Commit the record as `checks/<commit>/<fingerprint>.json` on `compat`; returns the commit URL.

    Runners of different machines write different files, so their commits never conflict; a re-run on
    the same machine replaces its own file.
    """
    return _commit_to_compat(
        client,
        repo,
        record_path(record.commit, record.fingerprint),
        record.to_json(),
        f"compat: v{record.version} {record.commit[:12]} on {record.fingerprint}: "
        + ("pass" if record.passed else "FAIL"),
    )


def write_speed_record(client: HubClient, repo: str, record: SpeedRecord) -> str:
    """Commit the record as `speed/<commit>/<fingerprint>.json` on `compat` (a re-run replaces it); the commit URL."""
    return _commit_to_compat(
        client,
        repo,
        speed_record_path(record.commit, record.env),
        record.to_json(),
        f"speed: v{record.version} {record.commit[:12]} on {record.fingerprint} ({record.device})",
    )
