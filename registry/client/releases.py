"""What a kernel repo has published, read from the hub alone (no checkout): each `vN` with the commits it
pointed at (date, title, signing key), and a repo's summary (`kernel-hub versions`, `kernel-hub info`).

A version's history is its branch's commits, newest first, minus what never was its head: the earlier parts
of an upload the stock client split into "Publish vN", "Publish vN (part 2)", ... and the repo's empty
initial commit. The signer is the key id on the first line of a variant's `metadata.json.sig`
(docs/HUB_PROTOCOL.md §7); the loader, not this listing, verifies it.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

from huggingface_hub.errors import HfHubHTTPError

from registry.spec.names import KERNEL_REPO_TYPE
from registry.spec.variant import SIGNATURE
from registry.wire import VersionNotFound, pick_version

from .fetch import FetchError, Hub

_PART = re.compile(r"^Publish v\d+ \(part \d+\)$")


@dataclass
class Release:
    commit: str
    date: str  # ISO 8601, UTC
    title: str
    signer: str  # key id, "" when unsigned


@dataclass
class Version:
    number: int
    head: str
    history: list[Release] = field(default_factory=list)


def _not_found(hub: Hub, repo_id: str, e: HfHubHTTPError) -> FetchError:
    status = e.response.status_code if e.response is not None else None
    if status in (401, 404):
        return FetchError(
            f"{repo_id} is not a kernel repo on {hub.endpoint} (or it is private: pass --token / set HF_TOKEN)"
        )
    said = " ".join((e.server_message or str(e)).split())[:200]
    return FetchError(f"{hub.endpoint} answered {status} for {repo_id}: {said}")


def published_versions(hub: Hub, repo_id: str) -> dict[int, str]:
    """N -> head commit of every `vN` branch."""
    try:
        return hub.request(f"list the versions of {repo_id}", hub.version_heads, repo_id)
    except HfHubHTTPError as e:
        raise _not_found(hub, repo_id, e) from None


def signer_at(hub: Hub, repo_id: str, commit: str) -> str:
    """The key id that signed the variants at `commit` ("" when none is signed; several joined by ", ")."""
    try:
        variants = hub.folder_names(repo_id, "build", commit)
    except HfHubHTTPError:
        return ""
    ids = set()
    for name in variants:
        try:
            lines = (
                hub.get(hub.file_url(repo_id, f"build/{name}/{SIGNATURE}", commit)).text.strip().splitlines()
            )
        except HfHubHTTPError:
            continue
        if lines:
            ids.add(lines[0].strip()[:32])
        break  # every variant of one publish is signed by the same key
    return ", ".join(sorted(ids))


def version_history(hub: Hub, repo_id: str, only: int | None = None) -> list[Version]:
    """Every `vN` (or only `only`), newest N first, with the commits it pointed at."""
    heads = published_versions(hub, repo_id)
    if only is not None:
        try:
            heads = {only: pick_version(repo_id, heads, only)}
        except VersionNotFound as e:
            raise FetchError(f"{repo_id} has no version {only} (versions: {e.have})") from None
    out = []
    for n, head in sorted(heads.items(), reverse=True):
        commits = hub.api.list_repo_commits(repo_id, repo_type=KERNEL_REPO_TYPE, revision=head)
        history: list[Release] = []
        child_title = None
        for c in commits:  # newest first
            was_head = child_title is None or not _PART.match(child_title)
            child_title = c.title
            if c.title == "initial commit" and c is commits[-1]:
                continue
            if was_head:
                date = c.created_at.strftime("%Y-%m-%dT%H:%M:%SZ")
                history.append(Release(c.commit_id, date, c.title, signer_at(hub, repo_id, c.commit_id)))
        out.append(Version(n, head, history))
    return out


def repo_info(hub: Hub, repo_id: str) -> dict:
    """The repo's summary: versions (head, date), the newest one's variants and signer, the org's trust and keys."""
    from .fetch import variant_metadata

    heads = published_versions(hub, repo_id)
    namespace = repo_id.split("/", 1)[0]
    info: dict = {"repo": repo_id, "endpoint": hub.endpoint, "versions": [], "latest": None}
    for n, head in sorted(heads.items(), reverse=True):
        (c,) = hub.api.list_repo_commits(repo_id, repo_type=KERNEL_REPO_TYPE, revision=head)[:1]
        info["versions"].append(
            {"version": n, "commit": head, "date": c.created_at.strftime("%Y-%m-%dT%H:%M:%SZ")}
        )
    if heads:
        n = max(heads)
        metas = variant_metadata(hub, repo_id, heads[n])
        info["latest"] = {
            "version": n,
            "commit": heads[n],
            "signer": signer_at(hub, repo_id, heads[n]),
            "variants": {v: (m.get("backend") or {}).get("type", "") for v, m in metas.items()},
        }
    overview = hub.get(hub.namespace_url("api/organizations", namespace) + "/overview").json()
    info["trusted_publisher"] = bool(overview.get("trustedKernelPublisher"))
    try:
        keys = hub.namespace_keys(namespace)
    except HfHubHTTPError:
        keys = None
    # None: a hub without the key route, whose keys ship in the repo (keys/<id>.pub)
    info["keys"] = (
        None if keys is None else [{k: v for k, v in key.items() if k != "endorsement"} for key in keys]
    )
    return info


def history_rows(found: list[Version]) -> list[dict]:
    """Flat rows for --json: one per (version, commit)."""
    return [{"version": v.number, "head": r.commit == v.head, **asdict(r)} for v in found for r in v.history]
