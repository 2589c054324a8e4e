"""`kernel-hub publish`: make a built dist version `vN` of a kernel repo, atomically and signed.

Order of work (docs/ARCHITECTURE.md, CONTRACTS.md): check the dist against its own digests → refuse if the
public API differs from the current `vN` head → stage a copy with `version` set and every `metadata.json`
signed → stop if `vN` already holds exactly that tree (no commit) → register the publisher key if the hub
lacks it → delete temporary branches that interrupted publishes left behind → upload the staged tree
to a fresh branch `publish/<start time>-<random>` (the stock client may split it into several commits)
→ check that branch's tree equals the staged tree → move `vN` to that commit in one compare-and-swap
against the head observed at the start → delete the temporary branch (retried; else the next publish does).

The swap uses our hub's `ref-update` extension; on any other Hub-API server it falls back to
`create_branch` (vN new: 409 if someone else made it) or a `create_commit` on vN with `parent_commit`
set to the observed head (412 if vN moved). Either way `vN` only ever points at a complete tree.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

from httpx2 import HTTPError
from huggingface_hub import CommitOperationAdd, CommitOperationDelete
from huggingface_hub.errors import EntryNotFoundError, HfHubHTTPError, HFValidationError
from huggingface_hub.hf_api import RepoFile
from huggingface_hub.utils import validate_repo_id
from huggingface_hub.utils.sha import git_hash  # the id the client compares with preupload's `oid`

from registry.spec import digest, names, signing
from registry.spec.variant import (
    BUILD_DIR,
    METADATA,
    SIGNATURE,
    SIGSTORE,
    MetadataError,
    VariantMetadata,
    metadata_path,
)
from registry.wire import KEYS_ROUTE, REPO_TYPE, HubClient, extension_answered, said

from . import inflight
from .errors import ApiChanged, PublishError, VersionMoved
from .foreign import adopt, is_foreign
from .keyless import ambient_identity, ambient_signer
from .keyless import bundle_problem as keyless_bundle_problem
from .out_dir import MARKER
from .team_keys import read_chain

log = logging.getLogger(__name__)

_UNTRACKED_REMOTE = {".gitattributes"}  # the Hub keeps it in every commit; upload_folder never deletes it
_CLEANUP_WAITS_S = (0.5, 2.0, 5.0)  # deleting the temporary branch: tries after these pauses


@dataclass
class PublishResult:
    repo_id: str
    version: int
    commit: str
    previous: str | None  # vN head before this publish (None: vN is new)
    variants: list[str]
    key_id: str
    notes: list[str] = field(default_factory=list)

    @property
    def unchanged(self) -> bool:
        return self.previous == self.commit

    def summary(self) -> str:
        """One line for the user: where vN is now and whether this publish moved it."""
        line = f"{self.repo_id} v{self.version} -> {self.commit}"
        if self.unchanged:
            return line + " (unchanged: the hub already holds this build, no commit made)"
        return line + (f" (was {self.previous[:12]})" if self.previous else " (new version)")


# ---------------------------------------------------------------------------------------------- pure


def version_branch(version: int) -> str:
    """Name of the branch that `kernels` resolves `version=N` to."""
    try:
        return names.version_branch(version)
    except ValueError as e:
        raise PublishError(str(e)) from None


def next_free_version(branches: Mapping[str, str]) -> int:
    """The smallest N above every published version (1 when there is none)."""
    return max(names.versions(dict(branches)), default=0) + 1


def check_repo_id(repo_id: str) -> tuple[str, str]:
    """(namespace, name) of an `org/name` repo id (the Hub's own rules; a kernel repo needs the namespace)."""
    try:
        validate_repo_id(repo_id)
    except HFValidationError as e:
        raise PublishError(f"repo id {repo_id!r} must look like 'org/fused-mlp' ({e})") from None
    ns, slash, name = repo_id.partition("/")
    if not slash:
        raise PublishError(f"repo id {repo_id!r} must look like 'org/fused-mlp' (a namespace is needed)")
    return ns, name


def dist_api(apis: Mapping[str, Mapping]) -> dict:
    """The one public API (variant -> its `api` record) all variants of a dist share; disagreeing ones are refused."""
    distinct = {json.dumps(a, sort_keys=True): v for v, a in apis.items()}
    if len(distinct) != 1:
        raise PublishError(
            f"variants of this dist record different APIs ({sorted(distinct.values())}): rebuild it"
        )
    api = next(iter(apis.values()))
    if not isinstance(api, dict) or "__all__" not in api:
        raise PublishError("the dist's metadata.json has no `api` record: rebuild it with `kernel-hub build`")
    return api


def api_differences(old: Mapping, new: Mapping) -> list[str]:
    """Human-readable differences between two `api` records ([] = same `__all__` and signatures)."""
    old_all, new_all = list(old.get("__all__", [])), list(new.get("__all__", []))
    old_sig, new_sig = old.get("signatures", {}), new.get("signatures", {})
    diffs = [f"removed {n}" for n in old_all if n not in new_all]
    diffs += [f"added {n}" for n in new_all if n not in old_all]
    diffs += [
        f"{n}{old_sig.get(n)} -> {n}{new_sig.get(n)}"
        for n in new_all
        if n in old_all and old_sig.get(n) != new_sig.get(n)
    ]
    return diffs


@dataclass(frozen=True)
class FileId:
    size: int
    git_sha1: str
    sha256: str

    def matches(self, entry: RepoFile) -> bool:
        if entry.size != self.size:
            return False
        if entry.lfs is not None:
            return entry.lfs.sha256 == self.sha256
        return entry.blob_id == self.git_sha1


def tree_problems(expected: Mapping[str, FileId], remote: Mapping[str, RepoFile]) -> list[str]:
    """Differences between the staged tree and a commit's tree ([] = identical, .gitattributes aside)."""
    remote = {p: e for p, e in remote.items() if p not in _UNTRACKED_REMOTE}
    problems = [f"missing {p}" for p in sorted(expected.keys() - remote.keys())]
    problems += [f"unexpected {p}" for p in sorted(remote.keys() - expected.keys())]
    problems += [
        f"different {p}"
        for p in sorted(expected.keys() & remote.keys())
        if not expected[p].matches(remote[p])
    ]
    return problems


# ----------------------------------------------------------------------------------------------- I/O


def read_dist(dist: Path) -> dict[str, VariantMetadata]:
    """variant -> metadata of a built dist, after checking every variant against its own digest.

    A kernel-builder build (`build/<variant>/` whose metadata.json has no digests) is taken as it is: `foreign.adopt`.
    """
    build_dir = Path(dist) / BUILD_DIR
    variants = sorted(p for p in build_dir.glob(f"*/{METADATA}")) if build_dir.is_dir() else []
    if not variants:
        if any(Path(dist).glob("*/__init__.py")) or (Path(dist) / "__init__.py").is_file():
            raise PublishError(
                f"{dist} holds kernel sources, not a built dist: run `kernel-hub build --source <package> "
                "--out dist/fused-mlp`, then publish dist/fused-mlp"
            )
        raise PublishError(
            f"{dist} has no build/<variant>/metadata.json: run `kernel-hub build --out {dist}` first"
        )
    metas = {}
    for meta_path in variants:
        name = meta_path.parent.name
        try:
            meta = VariantMetadata.read(meta_path.parent)
        except MetadataError as e:
            raise PublishError(f"variant {name}: {e}") from None
        if is_foreign(meta):  # kernel-builder's output: published as it is, its digests taken now
            meta = adopt(meta_path.parent, meta)
        problems = digest.verify_digests(meta_path.parent, meta.to_json())
        if problems:
            raise PublishError(
                f"variant {name} does not match its metadata digest ({'; '.join(problems[:5])}): rebuild the dist"
            )
        metas[name] = meta
    return metas


def stage_signed(
    dist: Path,
    stage: Path,
    metas: Mapping[str, VariantMetadata],
    version: int,
    key,
    keyless: Callable[[bytes], bytes] | None = None,
    chain: list[dict] | None = None,
) -> dict[str, FileId]:
    """Copy `dist` to `stage` with `version` set in every metadata.json and a fresh metadata.json.sig beside it.

    The public key goes along as `keys/<key id>.pub`, so loaders can pin it where the hub has no key
    route. `keyless` (see keyless.ambient_signer) adds a fresh metadata.json.sigstore; a bundle the dist
    already has must sign the staged bytes. Returns the staged tree (repo path -> FileId). Ed25519
    signatures are deterministic, so publishing the same dist with the same key twice stages identical bytes.
    """
    dist = Path(dist)
    for src in sorted(p for p in dist.rglob("*") if p.is_file()):
        rel = src.relative_to(dist).as_posix()
        parts = rel.split("/")
        if "__pycache__" in parts or rel.endswith(".pyc") or parts[-1] == SIGNATURE or rel == MARKER:
            continue
        dst = stage / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)
    for name, meta in metas.items():
        vdir = stage / BUILD_DIR / name
        data = meta.with_version(version).to_bytes()
        (vdir / METADATA).write_bytes(data)
        (vdir / SIGNATURE).write_text(signing.sign_metadata(data, key))
        if keyless is not None:
            (vdir / SIGSTORE).write_bytes(keyless(data))
        elif (vdir / SIGSTORE).is_file():
            problem = keyless_bundle_problem((vdir / SIGSTORE).read_bytes(), data)
            if problem:
                raise PublishError(
                    f"build/{name}/{SIGSTORE} {problem} (as v{version}): sign while publishing with "
                    f"--sigstore, or delete it from {dist}"
                )
    pub = signing.public_key_b64(key)
    key_file = stage / signing.key_file_path(signing.key_id(pub))
    key_file.parent.mkdir(parents=True, exist_ok=True)
    key_file.write_text(signing.key_file_text(pub))
    if chain:  # the key came by rotation: loaders pinned to an older key follow it (client/rotation.py)
        (stage / signing.endorsement_file_path(signing.key_id(pub))).write_text(
            json.dumps(chain, indent=1) + "\n"
        )
    return folder_tree(stage)


def folder_tree(folder: Path, skip: Callable[[str], bool] = lambda rel: False) -> dict[str, FileId]:
    """Repo path -> FileId of every file under `folder` (those `skip` names left out), as a hub tree lists them."""
    tree = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        rel = path.relative_to(folder).as_posix()
        if not skip(rel):
            data = path.read_bytes()
            tree[rel] = FileId(len(data), git_hash(data), hashlib.sha256(data).hexdigest())
    return tree


def ref_update(client: HubClient, repo_id: str, branch: str, old: str | None, new: str) -> bool | None:
    """CAS `refs/heads/<branch>` from `old` to `new` (our `ref-update` extension): True done, None = the hub
    lacks the extension.

    Raises VersionMoved when the server reports the ref is no longer at `old`.
    """
    r = client.post(
        f"api/kernels/{repo_id}/ref-update", {"ref": f"refs/heads/{branch}", "old": old, "new": new}
    )
    if r.status_code == 412:
        try:
            current = r.json().get("current")
        except ValueError:
            current = "unknown"
        raise VersionMoved(
            f"{branch} of {repo_id} moved during this publish (expected {old or 'no branch'}, "
            f"now {current}): another publish won; re-run to publish on top of it"
        )
    return True if extension_answered(r) else None


def register_key(client: HubClient, namespace: str, public_b64: str) -> str | None:
    """Make sure the hub lists the publisher key for `namespace`; returns a note when something happened.

    The key is posted only when the hub's list lacks it, so the note says so only then.
    """
    kid = signing.key_id(public_b64)
    listed = client.namespace_keys(namespace)
    if listed is not None and kid in {k.get("id") for k in listed}:
        return None
    r = client.post(f"{KEYS_ROUTE}/{namespace}", {"public_key": public_b64})
    if r.status_code == 403 and r.headers.get("X-Error-Code") == "KeyNotAllowed":
        raise PublishError(said(r))
    if not extension_answered(r):
        return (
            f"{client.endpoint} has no key registry: publisher key {kid} ships in the repo as "
            f"{signing.key_file_path(kid)}; loaders pin it on first use (or take it from the user)"
        )
    return f"publisher key {kid} registered for {namespace}"


def delete_branch(
    client: HubClient, repo_id: str, branch: str, waits_s: tuple[float, ...] = ()
) -> Exception | None:
    """Delete `branch` (gone already counts as done), trying again after each pause; the last error or None."""
    error: Exception | None = None
    for wait in (0.0, *waits_s):
        time.sleep(wait)
        try:
            client.api.delete_branch(repo_id, branch=branch, repo_type=REPO_TYPE)
            return None
        except HfHubHTTPError as e:
            if e.response is not None and e.response.status_code == 404:
                return None
            error = e
        except HTTPError as e:  # the hub is unreachable: maybe only for a moment
            error = e
    return error


def head_apis(client: HubClient, repo_id: str, head: str) -> dict[str, dict | None]:
    """variant -> the `api` its metadata.json records at commit `head` (None when it records none)."""
    try:
        variants = client.folder_names(repo_id, "build", head)
    except EntryNotFoundError:  # a vN without build/: nothing anyone could load, so nothing to keep
        return {}
    apis: dict[str, dict | None] = {}
    with tempfile.TemporaryDirectory(prefix="kernel-hub-head-") as cache:
        for v in variants:
            api = json.loads(client.download(repo_id, metadata_path(v), head, cache).read_text()).get("api")
            apis[v] = api if isinstance(api, dict) else None
    return apis


def compatibility_problems(published: Mapping[str, dict | None], new_api: Mapping) -> list[str]:
    """Why the dist may not replace the variants published at vN ([] = same API, no variant lost)."""
    problems = []
    for v, api in sorted(published.items()):
        if api is None:
            problems.append(f"{v} records no API, so compatibility cannot be shown")
        else:
            problems += [f"{v}: {d}" for d in api_differences(api, new_api)]
    return problems


def dropped_variants(published: Mapping[str, object], new_variants: set[str]) -> list[str]:
    """Variants published at vN that the dist lacks (users of those would silently fall back)."""
    return sorted(set(published) - new_variants)


def publish(
    repo_id: str,
    dist: Path,
    version: int,
    *,
    endpoint: str | None = None,
    token: str | None = None,
    key_path: Path | None = None,
    private: bool = False,
    allow_dropping_variants: bool = False,
    sigstore: bool = False,
    update: bool = False,
) -> PublishResult:
    """Publish the built `dist` as version `version` of `repo_id` (see the module docstring).

    `sigstore=True` also signs keyless with the CI job's OIDC identity (publisher/keyless.py). An existing
    `vN` that holds another build moves only with `update=True` (a compatible update: the API rule holds).
    """
    namespace, _ = check_repo_id(repo_id)
    if version == 0:
        raise PublishError(
            "--version 0 is refused: versions are major API versions counted from 1 (what `kernels` users ask "
            "for with version=1); publish it as --version 1"
        )
    branch = version_branch(version)
    metas = read_dist(Path(dist))
    new_api = dist_api({v: m.api for v, m in metas.items()})
    oidc_token = ambient_identity() if sigstore else None
    key_path = Path(key_path) if key_path else signing.default_key_path(namespace)
    client = HubClient.at(endpoint, token)
    if not key_path.exists():
        refuse_second_key(client, namespace, key_path)
    key, created = signing.load_or_create_key(key_path)
    pub = signing.public_key_b64(key)
    log.debug("signing with key %s from %s", signing.key_id(pub), key_path)
    notes = []
    if created:
        notes.append(f"created publisher key {key_path}")
        log.info(notes[-1])

    client.api.create_repo(repo_id, repo_type=REPO_TYPE, exist_ok=True, private=private)
    heads = client.branch_heads(repo_id)
    head = heads.get(branch)
    log.debug("%s on %s: %s is at %s", repo_id, client.endpoint, branch, head or "nothing (a new version)")
    if head is not None:
        published = head_apis(client, repo_id, head)
        problems = compatibility_problems(published, new_api)
        if problems:
            raise ApiChanged(
                f"the public API changed ({'; '.join(problems)}): publish it as v{next_free_version(heads)}, "
                f"{branch} must keep the API it was published with"
            )
        dropped = dropped_variants(published, set(metas))
        if dropped and not allow_dropping_variants:
            raise PublishError(
                f"{branch} has variant(s) {dropped} that {dist} lacks; users of them would lose the kernel. "
                "Build them into the dist, or pass --allow-dropping-variants"
            )

    with (
        tempfile.TemporaryDirectory(prefix="kernel-hub-publish-") as tmp,
        ambient_signer(oidc_token) if oidc_token else nullcontext() as keyless,
    ):
        stage = Path(tmp)
        expected = stage_signed(Path(dist), stage, metas, version, key, keyless, read_chain(key_path, pub))
        key_note = register_key(client, namespace, pub)
        if key_note:
            notes.append(key_note)
            log.info(key_note)
        remove_stale_publish_branches(client, repo_id, heads)
        if head is not None and not tree_problems(expected, client.tree(repo_id, head)):
            commit = head  # vN already holds exactly this signed build: moving it would change nothing
        else:
            if head is not None and not update:
                raise PublishError(
                    f"{branch} of {repo_id} already holds another build ({head[:12]}); nothing was moved: "
                    f"pass --update to replace it (users of version={version} get the new build), or publish "
                    f"it as --version {next_free_version(heads)}"
                )
            log.info(
                "uploading %d files of %s (%s) to %s",
                len(expected),
                dist,
                _size(sum(f.size for f in expected.values())),
                client.endpoint,
            )
            for path, f in sorted(expected.items()):
                log.debug("  %s  %s  sha256 %s", path, _size(f.size), f.sha256[:12])
            commit = _upload_and_swap(client, repo_id, branch, head, stage, expected)
    return PublishResult(repo_id, version, commit, head, sorted(metas), signing.key_id(pub), notes)


def refuse_second_key(client: HubClient, namespace: str, key_path: Path) -> None:
    """Refuse to make a fresh key for a namespace the hub already knows keys of (before any file is written).

    A teammate or CI runner without the team's key would otherwise sign with a new one, and every loader
    pinned to the team's key would refuse that version.
    """
    listed = client.namespace_keys(namespace)
    if listed:
        ids = ", ".join(k.get("id", "?") for k in listed)
        raise PublishError(
            f"{namespace} signs with publisher key(s) {ids} on {client.endpoint}, and there is no key at "
            f"{key_path}: use the team's key (`kernel-hub key export {namespace}` where it lives, then "
            f"`kernel-hub key import {namespace} FILE` here, or --key / KERNEL_HUB_KEY), or add a new key on "
            f"purpose with `kernel-hub key rotate {namespace}` from a machine holding a current key"
        )


def _size(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 100_000 else f"{n / 1e3:.1f} kB"


def remove_stale_publish_branches(client: HubClient, repo_id: str, heads: Mapping[str, str]) -> list[str]:
    """Delete the temporary branches of publishes that started over `names.STALE_PUBLISH_S` ago; returns them."""
    now = time.time()
    stale = [
        b
        for b in sorted(heads)
        if (started := names.publish_branch_started(b)) is not None and now - started > names.STALE_PUBLISH_S
    ]
    own = inflight.orphans(client.endpoint, repo_id)  # this machine's interrupted publishes: any age
    records = {b: r for r, b in own}
    stale += sorted({b for _, b in own if b in heads} - set(stale))
    for b in stale:
        error = delete_branch(client, repo_id, b)
        if error is None:
            log.info("removed %s, left behind by an interrupted publish", b)
            if b in records:
                inflight.done(records[b])
        else:
            log.warning("could not remove %s, left behind by an interrupted publish: %s", b, error)
    for record, b in own:
        if b not in heads:
            inflight.done(record)  # its branch is gone already (gc, or never created)
    return stale


def _upload_and_swap(
    client: HubClient,
    repo_id: str,
    branch: str,
    head: str | None,
    stage: Path,
    expected: Mapping[str, FileId],
) -> str:
    """Upload `stage` to a temporary branch, check its tree, CAS `branch` from `head` to it; return vN's commit."""
    temp = names.publish_branch(time.time(), uuid.uuid4().hex[:12])
    record = inflight.start(client.endpoint, repo_id, temp)
    log.debug("temporary branch %s (recorded in %s)", temp, record)
    try:
        client.api.create_branch(repo_id, branch=temp, revision=head, repo_type=REPO_TYPE)
        client.api.upload_folder(
            repo_id=repo_id,
            folder_path=stage,
            repo_type=REPO_TYPE,
            revision=temp,
            delete_patterns="*",
            commit_message=f"Publish {branch}",
        )
        final = client.branch_heads(repo_id).get(temp)
        if final is None:
            raise PublishError(f"temporary branch {temp} vanished during the upload; nothing was published")
        problems = tree_problems(expected, client.tree(repo_id, final))
        if problems:
            raise PublishError(
                f"the uploaded tree at {final} differs from the dist ({'; '.join(problems[:5])}); "
                f"{branch} was not moved"
            )
        log.debug("uploaded tree at %s matches the dist; moving %s from %s", final, branch, head or "nothing")
        swapped = ref_update(client, repo_id, branch, head, final)  # also when final == head: confirms vN
        if swapped is None:
            log.info(
                "%s has no ref-update extension: moving %s with the Hub API's own checks",
                client.endpoint,
                branch,
            )
            return _swap_with_hub_api(client, repo_id, branch, head, final, stage, expected)
        return final
    finally:
        try:
            error = delete_branch(client, repo_id, temp, _CLEANUP_WAITS_S)
            if error is None:
                inflight.done(record)
            else:
                log.warning(
                    "could not delete the temporary branch %s (%s): the next publish to %s removes it, "
                    "as does `kernel-hub gc` on the hub",
                    temp,
                    " ".join(str(error).split())[:200],
                    repo_id,
                )
        finally:
            inflight.ended(record)  # interrupted here too (Ctrl-C again): the record is an orphan now


def _swap_with_hub_api(
    client: HubClient,
    repo_id: str,
    branch: str,
    head: str | None,
    final: str,
    stage: Path,
    expected: Mapping[str, FileId],
) -> str:
    """Compare-and-swap through plain Hub routes: create vN (409 if it exists) or commit on it with parent check."""
    if head is None:
        try:
            client.api.create_branch(repo_id, branch=branch, revision=final, repo_type=REPO_TYPE)
        except HfHubHTTPError as e:
            if e.response is not None and e.response.status_code == 409:
                raise VersionMoved(
                    f"{branch} of {repo_id} was created by someone else during this publish: re-run to publish on top"
                ) from None
            raise
        return final
    current = client.tree(repo_id, head)
    ops: list = [
        CommitOperationAdd(path_in_repo=p, path_or_fileobj=str(stage / p))
        for p in sorted(expected)
        if p not in current or not expected[p].matches(current[p])
    ]
    ops += [
        CommitOperationDelete(path_in_repo=p)
        for p in sorted(current.keys() - expected.keys() - _UNTRACKED_REMOTE)
    ]
    if not ops:
        return head
    try:
        info = client.api.create_commit(
            repo_id,
            ops,
            commit_message=f"Publish {branch}",
            repo_type=REPO_TYPE,
            revision=branch,
            parent_commit=head,
        )
    except HfHubHTTPError as e:
        if e.response is not None and e.response.status_code == 412:
            raise VersionMoved(
                f"{branch} of {repo_id} moved during this publish (expected {head}): another publish won; re-run"
            ) from None
        raise
    return info.oid
