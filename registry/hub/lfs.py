"""Git LFS for publishers with HF_HUB_DISABLE_XET=1: batch, PUT to a signed URL, verify.
docs/HUB_PROTOCOL.md §4 (basic transfer only); the Xet token route answers a clear 501.

The PUT carries no credentials (gotcha 12), so the batch answer embeds an HMAC signature over
(repo, oid, size, expiry) in the upload URL.
"""

from __future__ import annotations

import hashlib
import hmac
import time

from starlette.concurrency import run_in_threadpool

from . import validate
from .errors import HubError
from .routing import route
from .web import Call, ok

UPLOAD_TTL_S = 3600
WRITE_BATCH = 4 * 1024 * 1024
LFS_JSON = "application/vnd.git-lfs+json"


def sign(secret: bytes, repo_id: int, oid: str, size: int, exp: int) -> str:
    return hmac.new(secret, f"{repo_id}:{oid}:{size}:{exp}".encode(), hashlib.sha256).hexdigest()


def _lfs_base(call: Call, repo) -> str:
    return f"{call.base_url()}/api/kernel-hub/lfs/{validate.TYPE_PREFIX[repo.type]}/{repo.repo_id}"


def batch(call: Call):
    name = call.p["name"]
    if not name.endswith(".git"):
        raise HubError("NotFound", "LFS batch URLs end in '<repo>.git/info/lfs/objects/batch'")
    call.p["name"] = name[: -len(".git")]
    body = call.json()
    if body.get("operation") != "upload":
        raise HubError("BadRequest", "only the LFS 'upload' operation is served; download through /resolve")
    repo = call.repo(write=True)
    objects = body.get("objects")
    if not isinstance(objects, list):
        raise HubError("BadRequest", "'objects' must be a list of {oid, size}")
    exp = int(time.time()) + UPLOAD_TTL_S
    out = []
    for obj in objects:
        oid, size = (
            obj.get("oid") if isinstance(obj, dict) else None,
            obj.get("size") if isinstance(obj, dict) else None,
        )
        try:
            validate.sha256_hex(oid)
            if not isinstance(size, int) or size < 0 or size > call.hub.config.max_lfs_bytes:
                raise HubError(
                    "BadRequest", f"size must be an integer from 0 to {call.hub.config.max_lfs_bytes}"
                )
        except HubError as e:
            out.append({"oid": oid, "size": size, "error": {"code": 422, "message": e.message}})
            continue
        if call.hub.store.lfs_size(repo, oid) == size and call.hub.blobs.exists(oid):
            out.append({"oid": oid, "size": size})  # already stored for this repo: skip
            continue
        href = f"{_lfs_base(call, repo)}/{oid}?size={size}&exp={exp}&sig={sign(call.hub.secret, repo.id, oid, size, exp)}"
        out.append(
            {
                "oid": oid,
                "size": size,
                "authenticated": True,
                "actions": {
                    "upload": {"href": href, "expires_in": UPLOAD_TTL_S},
                    "verify": {"href": f"{_lfs_base(call, repo)}/{oid}/verify", "expires_in": UPLOAD_TTL_S},
                },
            }
        )
    return ok(
        {"transfer": "basic", "objects": out, "hash_algo": "sha256"}, headers={"Content-Type": LFS_JSON}
    )


def _upload_target(call: Call, oid: str):
    """(repo, size) of a PUT to a signed upload URL; Forbidden unless the signature holds."""
    q = call.request.query_params
    type_ = validate.REPO_TYPES.get(call.p["T"])
    repo = call.hub.store.get(type_, call.p["ns"], call.p["name"]) if type_ else None
    try:
        size, exp = int(q.get("size", "")), int(q.get("exp", ""))
    except ValueError:
        raise HubError(
            "Forbidden", "LFS upload URL lacks size/exp/sig; ask the batch API for a new one"
        ) from None
    good = repo is not None and hmac.compare_digest(
        q.get("sig", ""), sign(call.hub.secret, repo.id, oid, size, exp)
    )
    if not good or exp < time.time():
        raise HubError("Forbidden", "LFS upload URL is invalid or expired; ask the batch API for a new one")
    return repo, size


async def upload(call: Call):
    """PUT of the raw bytes to a signed URL: checked against oid and size, then stored and granted.
    Streamed (up to 50 GiB), so a coroutine; writing and hashing run in worker threads, 4 MiB at a time."""
    oid = validate.sha256_hex(call.p["oid"])
    repo, size = await run_in_threadpool(_upload_target, call, oid)
    writer = await run_in_threadpool(call.hub.blobs.new_writer)
    try:
        pending: list[bytes] = []
        pending_bytes = 0
        async for chunk in call.stream(size):
            pending.append(chunk)
            pending_bytes += len(chunk)
            if pending_bytes >= WRITE_BATCH:
                await run_in_threadpool(writer.write, b"".join(pending))
                pending, pending_bytes = [], 0
        await run_in_threadpool(writer.write, b"".join(pending))
        staged = await run_in_threadpool(writer.finish)
    except BaseException:
        writer.abort()
        raise
    await run_in_threadpool(_store_upload, call, repo, oid, size, staged)
    return ok({})


def _store_upload(call: Call, repo, oid: str, size: int, staged) -> None:
    if staged.sha256 != oid or staged.size != size:
        call.hub.blobs.discard(staged)
        raise HubError(
            "LfsObjectMismatch",
            f"uploaded bytes have sha256 {staged.sha256} and size {staged.size}, expected {oid} and {size}",
        )
    call.hub.blobs.promote(staged)
    call.hub.store.grant_lfs(repo, oid, size)


def verify(call: Call):
    repo = call.repo(write=True)
    body = call.json()
    oid = validate.sha256_hex(call.p["oid"])
    size = call.hub.store.lfs_size(repo, oid)
    if size is None or not call.hub.blobs.exists(oid) or body.get("size", size) != size:
        raise HubError(
            "UnknownLfsObject", f"LFS object {oid} (size {body.get('size')}) is not stored for {repo.repo_id}"
        )
    return ok({"oid": oid, "size": size})


def xet_write_token(call: Call):
    raise HubError(
        "XetNotSupported",
        "this hub does not speak Xet; set HF_HUB_DISABLE_XET=1 to upload large files through Git LFS",
    )


ROUTES = [
    route("POST", "kernels/{ns}/{name}/info/lfs/objects/batch", batch, T="kernels"),
    route("POST", "{ns}/{name}/info/lfs/objects/batch", batch, T="models"),
    route("PUT", "api/kernel-hub/lfs/{T}/{ns}/{name}/{oid}", upload),
    route("POST", "api/kernel-hub/lfs/{T}/{ns}/{name}/{oid}/verify", verify),
    route("GET", "api/{T}/{ns}/{name}/xet-write-token/{rev:path}", xet_write_token),
]
