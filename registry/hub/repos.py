"""Repo routes: create, delete, info (per revision). docs/HUB_PROTOCOL.md §2."""

from __future__ import annotations

from datetime import UTC, datetime

from . import validate
from .errors import HubError
from .manifest import pointer_size
from .routing import route
from .storage.repos import Repo
from .web import Call, ok


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _target(call: Call, body: dict) -> tuple[str, str, str]:
    """(type, namespace, name) of a create/delete body; the namespace defaults to the caller."""
    type_ = validate.repo_type(body.get("type"))
    name = body.get("name")
    org = body.get("organization")
    if isinstance(name, str) and "/" in name and not org:
        org, name = name.split("/", 1)
    ns = org or call.require_user().user
    return type_, validate.namespace(ns), validate.repo_name_part(name, "repo name")


def create_repo(call: Call):
    body = call.json()
    type_, ns, name = _target(call, body)
    who = call.require_write(ns)
    private = bool(body.get("private")) or body.get("visibility") == "private"
    existing = call.hub.store.get(type_, ns, name)
    if existing is not None:
        raise HubError(
            "RepoExists",
            f"You already created this {type_} repo: {ns}/{name}",
            body={"url": call.repo_url(existing)},
        )
    try:
        repo = call.hub.store.create(type_, ns, name, private, who.user)
    except HubError as e:  # lost a race with a concurrent create
        if e.kind == "RepoExists":
            e.body["url"] = call.repo_url(call.hub.store.get(type_, ns, name))
        raise
    return ok({"url": call.repo_url(repo), "name": repo.repo_id, "id": repo.repo_id})


def delete_repo(call: Call):
    body = call.json()
    type_, ns, name = _target(call, body)
    call.require_write(ns)
    repo = call.hub.store.get(type_, ns, name)
    if repo is None:
        raise HubError("RepoNotFound", f"Repository Not Found: {type_} repo {ns}/{name} does not exist")
    call.hub.store.delete(repo)
    return ok({})


def info_json(call: Call, repo: Repo, commit_id: str) -> dict:
    store = call.hub.store
    commit = store.get_commit(repo, commit_id)
    out = {
        "_id": f"{repo.type}-{repo.id}",
        "id": repo.repo_id,
        "author": repo.namespace,
        "sha": commit_id,
        "lastModified": iso(commit.created_at),
        "createdAt": iso(repo.created_at),
        "private": repo.private,
        "gated": False,
        "disabled": False,
        "downloads": 0,
        "likes": 0,
        "tags": [],
    }
    if repo.type == "model":
        out["siblings"] = [
            {
                "rfilename": p,
                "size": e.size,
                "blobId": e.oid,
                **(
                    {"lfs": {"size": e.size, "sha256": e.sha256, "pointerSize": pointer_size(e)}}
                    if e.lfs
                    else {}
                ),
            }
            for p, e in sorted(store.manifest(repo, commit_id).items())
        ]
    return out


def repo_info(call: Call):
    repo = call.repo()
    rev = call.p.get("rev") or "main"
    return ok(info_json(call, repo, call.hub.store.resolve(repo, rev)))


ROUTES = [
    route("POST", "api/repos/create", create_repo),
    route("DELETE", "api/repos/delete", delete_repo),
    route("GET", "api/{T}/{ns}/{name}", repo_info),
    route("GET", "api/{T}/{ns}/{name}/revision/{rev:path}", repo_info),
]
