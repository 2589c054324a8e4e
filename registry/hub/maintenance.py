"""`kernel-hub gc` and `kernel-hub fsck`: safe while the hub serves (docs/SERVING.md "Maintenance").

gc: (1) removes temp files of dead processes; (2) deletes `publish/<start>-<rand>` branches of publishes that
started over `publish_max_age_s` ago (interrupted ones; the start time is in the name, `spec.names`: the head
commit is the old vN's until the upload lands, so its age says nothing; by compare-and-swap, so a publish that
moves its branch meanwhile keeps it); (3) deletes blobs no commit and no LFS grant references, once untouched
for `grace_s`. The blob listing is taken before the reference query, and each delete is re-decided
under the blob's lease lock at the moment of deletion (`Leases.sweep`, docs/CONTRACTS.md "Blob store"),
so a blob a request is about to commit survives (its `promote` leased it), on one machine or a fleet of
replicas on PostgreSQL + S3, and several gc runs may overlap.

fsck: re-hashes every blob; a blob whose bytes do not hash to its name, or whose size differs from the
size the commits record, is quarantined; referenced blobs that are absent are reported.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from registry.spec import names

from .blobcheck import sha256_of
from .errors import HubError
from .storage.blobs import BlobMissing, BlobStore
from .storage.leases import Leases
from .storage.repos import RepoStore

log = logging.getLogger(__name__)

GRACE_S = 3600.0  # longer than any request: a staged blob is committed well within it


@dataclass
class GcReport:
    temp_files: int = 0
    branches: list[str] = field(default_factory=list)  # "ns/name@branch"
    kept_branches: list[str] = field(default_factory=list)  # younger than the limit: maybe a live publish
    blobs: int = 0
    blob_bytes: int = 0
    kept_recent: int = 0  # unreferenced, but younger than the grace period


def remove_publish_branches(
    store: RepoStore, max_age_s: float, dry_run: bool = False
) -> tuple[list[str], list[str]]:
    """Delete the temporary `publish/*` branches of publishes that started over `max_age_s` ago; returns
    (removed, kept younger) as `ns/name@branch` (kept ones with their age)."""
    now = time.time()
    removed, kept = [], []
    for repo, branch, head in store.branches_with_prefix(names.PUBLISH_BRANCH_PREFIX):
        started = names.publish_branch_started(branch) or 0.0
        if started >= now - max_age_s:
            kept.append(f"{repo.repo_id}@{branch} ({now - started:.0f} s old)")
            continue
        if not dry_run:
            try:
                store.delete_ref(repo, "branch", branch, expect=head)
            except HubError as e:  # moved or deleted meanwhile: its publisher is alive, or cleaned it
                log.info("kept %s@%s: %s", repo.repo_id, branch, e.message)
                continue
        removed.append(f"{repo.repo_id}@{branch}")
    return removed, kept


def gc(
    store: RepoStore,
    blobs: BlobStore,
    grace_s: float = GRACE_S,
    publish_max_age_s: float = names.STALE_PUBLISH_S,
    dry_run: bool = False,
) -> GcReport:
    """One garbage collection pass (see the module docstring); `dry_run` only reports."""
    report = GcReport()
    now = time.time()
    report.temp_files = blobs.clean_staging(grace_s, dry_run=dry_run)
    report.branches, report.kept_branches = remove_publish_branches(store, publish_max_age_s, dry_run)
    leases = Leases(store.engine)
    listed = list(blobs.iter_blobs())  # before the references: a blob committed later is newer anyway
    referenced = store.referenced_blobs()
    cutoff = now - grace_s
    for b in listed:
        if b.sha256 in referenced:
            continue
        if b.mtime >= cutoff:
            report.kept_recent += 1
            continue
        if dry_run or leases.sweep(blobs, b.sha256, grace_s):
            report.blobs += 1
            report.blob_bytes += b.size
    if not dry_run:
        leases.expire(grace_s)
    log.info(
        "gc%s: %d temp files, %d publish branches, %d unreferenced blobs (%d bytes); %d kept within the grace",
        " (dry run)" if dry_run else "",
        report.temp_files,
        len(report.branches),
        report.blobs,
        report.blob_bytes,
        report.kept_recent,
    )
    return report


@dataclass
class FsckReport:
    checked: int = 0
    damaged: list[str] = field(default_factory=list)  # "<sha256>: why -> where it went"
    missing: list[str] = field(default_factory=list)  # "<sha256> (used by ns/name:path, ...)"

    @property
    def ok(self) -> bool:
        return not self.damaged and not self.missing


def _used_by(store: RepoStore, sha256: str) -> str:
    """` (used by ns/name:path, ...)`: which repo files hold this content, so the operator knows what to
    re-publish."""
    users = store.users_of(sha256)
    return f" (used by {', '.join(users)})" if users else ""


def fsck(store: RepoStore, blobs: BlobStore, quarantine: bool = True) -> FsckReport:
    """Re-hash every blob; quarantine (or with `quarantine=False` only report) the damaged ones."""
    report = FsckReport()
    sizes = store.committed_sizes()
    stored = set()
    for b in blobs.iter_blobs():
        stored.add(b.sha256)
        report.checked += 1
        why = None
        if b.sha256 in sizes and b.size != sizes[b.sha256]:
            why = f"size {b.size} differs from the committed {sizes[b.sha256]}"
        else:
            try:
                actual = sha256_of(blobs, b.sha256)
            except (FileNotFoundError, BlobMissing):
                continue  # deleted meanwhile (gc)
            if actual != b.sha256:
                why = f"its bytes hash to {actual}"
        if why:
            where = blobs.quarantine(b.sha256, why) if quarantine else "left in place"
            report.damaged.append(f"{b.sha256}: {why} -> {where}{_used_by(store, b.sha256)}")
    referenced = store.referenced_blobs()
    missing = sorted(s for s in referenced - stored if not blobs.exists(s))
    report.missing = [f"{s}{_used_by(store, s)}" for s in missing]
    return report
