"""Ref routes: list refs, create/delete branches and tags, and the `ref-update` CAS extension.
docs/HUB_PROTOCOL.md §2 and §5 (ref-update).
"""

from __future__ import annotations

from registry.spec.names import is_commit

from . import validate
from .errors import HubError
from .routing import route
from .web import Call, ok


def _ref_json(kind: str, name: str, commit_id: str) -> dict:
    prefix = "refs/heads/" if kind == "branch" else "refs/tags/"
    return {"name": name, "ref": prefix + name, "targetCommit": commit_id}


def list_refs(call: Call):
    repo = call.repo()
    refs = call.hub.store.refs(repo)
    out = {
        "branches": [_ref_json(r.kind, r.name, r.commit_id) for r in refs if r.kind == "branch"],
        "tags": [_ref_json(r.kind, r.name, r.commit_id) for r in refs if r.kind == "tag"],
        "converts": [],
    }
    if call.request.query_params.get("include_prs") in ("1", "true", "True"):
        out["pullRequests"] = []
    return ok(out)


def create_branch(call: Call):
    repo = call.repo(write=True)
    name = validate.ref_name(call.p["branch"], "branch")
    body = call.json()
    start = body.get("startingPoint") or "main"
    if not isinstance(start, str):
        raise HubError("BadRequest", "startingPoint must be a revision string")
    commit_id = call.hub.store.resolve(repo, start)
    call.hub.store.create_ref(repo, "branch", name, commit_id)
    return ok({"name": name, "ref": f"refs/heads/{name}", "targetCommit": commit_id})


def delete_branch(call: Call):
    repo = call.repo(write=True)
    name = call.p["branch"].removeprefix("refs/heads/")
    if name == "main":
        raise HubError("Forbidden", "the main branch is protected and cannot be deleted")
    call.hub.store.delete_ref(repo, "branch", name)
    return ok({})


def create_tag(call: Call):
    repo = call.repo(write=True)
    body = call.json()
    name = validate.ref_name(body.get("tag"), "tag")
    commit_id = call.hub.store.resolve(repo, call.p["rev"] or "main")
    call.hub.store.create_ref(repo, "tag", name, commit_id)
    return ok({"name": name, "ref": f"refs/tags/{name}", "targetCommit": commit_id})


def delete_tag(call: Call):
    repo = call.repo(write=True)
    call.hub.store.delete_ref(repo, "tag", call.p["tag"].removeprefix("refs/tags/"))
    return ok({})


def ref_update(call: Call):
    """Atomic compare-and-swap of one ref: `{"ref": "refs/heads/vN", "old": <sha>|null, "new": <sha>}`."""
    repo = call.repo(write=True)
    body = call.json()
    ref, old, new = body.get("ref"), body.get("old"), body.get("new")
    if not isinstance(ref, str) or not ref.startswith(("refs/heads/", "refs/tags/")):
        raise HubError("BadRequest", f"ref must be 'refs/heads/<branch>' or 'refs/tags/<tag>', got {ref!r}")
    kind = "branch" if ref.startswith("refs/heads/") else "tag"
    name = validate.ref_name(ref.split("/", 2)[2], kind)
    for label, value in (("old", old), ("new", new)):
        if value is None and label == "old":
            continue
        if not isinstance(value, str) or not is_commit(value):
            raise HubError("BadRequest", f"{label} must be a full 40-hex commit id, got {value!r}")
    call.hub.store.update_ref(repo, kind, name, old, new)
    return ok({"ref": ref, "old": old, "new": new})


ROUTES = [
    route("GET", "api/{T}/{ns}/{name}/refs", list_refs),
    route("POST", "api/{T}/{ns}/{name}/branch/{branch:path}", create_branch),
    route("DELETE", "api/{T}/{ns}/{name}/branch/{branch:path}", delete_branch),
    route("POST", "api/{T}/{ns}/{name}/tag/{rev:path}", create_tag),
    route("DELETE", "api/{T}/{ns}/{name}/tag/{tag:path}", delete_tag),
    route("POST", "api/{T}/{ns}/{name}/ref-update", ref_update),
]
