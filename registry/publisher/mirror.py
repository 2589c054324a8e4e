"""`kernel-hub mirror`: copy a kernel repo's versions from any Hub-API server into ours, signatures kept.

Every `vN` branch of the source is downloaded as it is (huggingface_hub's snapshot) and uploaded as `vN` of
the target, byte for byte: metadata.json and its `.sig` / `.sigstore` stay the publisher's, so a loader
verifies the mirror against the same key as the original. The publisher keys the tree ships
(`keys/<id>.pub`) are registered for the target namespace where the target hub has a key registry. A
version whose target branch already holds the same tree is left as it is; one that holds another build moves
only with `update=True` (as `publish --update`), and without it nothing is uploaded for any version.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from httpx2 import TransportError
from huggingface_hub.errors import HfHubHTTPError

from registry.spec import names, signing
from registry.spec.signing import SignatureError
from registry.wire import REPO_TYPE, HubClient

from .errors import PublishError
from .publish import check_repo_id, folder_tree, register_key, tree_problems

log = logging.getLogger(__name__)


@dataclass
class MirrorResult:
    source: str
    target: str
    versions: dict[int, str] = field(default_factory=dict)  # N -> target commit
    unchanged: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _not_mirrored(rel: str) -> bool:
    """huggingface_hub's download bookkeeping (.cache/) and the Hub's own .gitattributes."""
    return rel.startswith(".cache/") or rel == ".gitattributes"


def mirror(
    source: str,
    target: str | None = None,
    *,
    source_endpoint: str | None = None,
    source_token: str | None = None,
    endpoint: str | None = None,
    token: str | None = None,
    update: bool = False,
) -> MirrorResult:
    """Copy every vN of `source` (on `source_endpoint`) to `target` (default: the same id) on `endpoint`.

    Raises PublishError before anything is uploaded when a target vN holds another build and not `update`."""
    target = target or source
    check_repo_id(source)
    namespace, _ = check_repo_id(target)
    src = HubClient.at(source_endpoint, source_token)
    with _asking(src, source):
        versions = sorted(src.version_heads(source).items())
    if not versions:
        raise PublishError(
            f"{source} on {src.endpoint} has no version branch (v1, v2, ...): nothing to mirror"
        )
    dst = HubClient.at(endpoint, token)
    dst.api.create_repo(target, repo_type=REPO_TYPE, exist_ok=True)
    result = MirrorResult(source, target)
    heads = dst.branch_heads(target)  # only this mirror writes its vN branches below
    with tempfile.TemporaryDirectory(prefix="kernel-hub-mirror-") as tmp:
        keys: dict[int, dict[str, str]] = {}  # N -> the keys/<id>.pub its tree ships

        def fetch(n: int, commit: str) -> Path:
            with _asking(src, source):
                folder = src.snapshot(source, commit, str(Path(tmp) / str(n)))
            keys[n] = {p.name: p.read_text() for p in sorted((folder / signing.KEYS_DIR).glob("*.pub"))}
            return folder

        # The versions the target has are compared before anything is written; only moving ones stay on disk.
        moving: dict[int, Path] = {}
        for n, commit in versions:
            head = heads.get(names.version_branch(n))
            if head is None:
                continue
            folder = fetch(n, commit)
            if tree_problems(folder_tree(folder, _not_mirrored), dst.tree(target, head)):
                moving[n] = folder
            else:
                result.versions[n] = head
                result.unchanged.append(n)
                shutil.rmtree(folder)
        if moving and not update:
            held = ", ".join(f"v{n} ({heads[names.version_branch(n)][:12]})" for n in moving)
            raise PublishError(
                f"{target} on {dst.endpoint} already holds other builds at {held}; nothing was mirrored: pass "
                f"--update to move them to those of {source} on {src.endpoint} (users of those versions get its "
                "builds), or mirror into another repo with --to-repo"
            )
        keys_seen: set[str] = set()  # a key that every version ships is registered once
        for n, commit in versions:
            folder = None if n in result.unchanged else moving.pop(n, None) or fetch(n, commit)
            result.notes += _register_keys(dst, namespace, keys[n], keys_seen)
            if folder is None:
                continue
            branch = names.version_branch(n)
            if branch not in heads:
                dst.api.create_branch(target, branch=branch, repo_type=REPO_TYPE)
            info = dst.api.upload_folder(repo_id=target, folder_path=folder, repo_type=REPO_TYPE, revision=branch,
                                         delete_patterns="*", ignore_patterns=[".cache/**"],
                                         commit_message=f"Mirror {source}@{branch} ({commit[:12]})")  # fmt: skip
            shutil.rmtree(folder)
            result.versions[n] = info.oid
            log.info("%s %s -> %s %s (%s)", source, branch, target, branch, info.oid[:12])
    return result


@contextmanager
def _asking(src: HubClient, source: str) -> Iterator[None]:
    """The source hub's failures as a PublishError naming that hub and `--from` (the CLI's generic advice is
    about the target: `--endpoint`, create_repo)."""
    try:
        yield
    except HfHubHTTPError as e:
        status = e.response.status_code if e.response is not None else None
        why = " ".join((e.server_message or str(e).split("\n")[0]).split())[:200]  # read also from a stream
        token = "; pass --from-token for a private repo" if status in (401, 403, 404) else ""
        raise PublishError(
            f"the source hub {src.endpoint} answered {status} for {source} ({why}): "
            f"check the repo id and --from{token}"
        ) from None
    except TransportError as e:
        raise PublishError(
            f"cannot reach the source hub {src.endpoint} ({type(e).__name__}): check --from"
        ) from None


def _register_keys(dst: HubClient, namespace: str, shipped: dict[str, str], seen: set[str]) -> list[str]:
    """Register the publisher keys a tree ships (`shipped`: keys/<id>.pub name -> text) for `namespace` on the
    target hub, except those named in `seen` (an earlier version's); adds the ones it handles to `seen`."""
    notes = []
    for name, text in shipped.items():
        if name in seen:
            continue
        seen.add(name)
        try:
            pub = signing.read_key_file(f"{signing.KEYS_DIR}/{name}", text)
        except SignatureError as e:
            notes.append(f"{name} not registered: {e}")
            continue
        note = register_key(dst, namespace, pub)
        if note:
            notes.append(note)
    return notes
