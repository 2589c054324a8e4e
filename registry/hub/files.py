"""File routes: tree listings (paginated with `Link`), paths-info, and resolve HEAD/GET with Range.
docs/HUB_PROTOCOL.md §2 (tree, paths-info, resolve). File bodies go out through starlette's
`FileResponse`, or through nginx by `X-Accel-Redirect` in the production setup (docs/SERVING.md).
"""

from __future__ import annotations

import os
from urllib.parse import parse_qs, quote, urlsplit

from starlette.responses import (
    FileResponse,
    MalformedRangeHeader,
    RangeNotSatisfiable,
    Response,
    StreamingResponse,
)

from . import manifest as mf
from .errors import HubError
from .routing import route
from .storage import db
from .web import Call, ok


def _page_link(call: Call, commit_id: str, what: str, path: str, cursor: int) -> str:
    """Absolute URL of the next page, pinned to the commit so pages never mix two heads."""
    q = {k: v for k, v in call.request.query_params.items() if k != "cursor"}
    q["cursor"] = str(cursor)
    qs = "&".join(f"{quote(k, safe='[]')}={quote(v, safe='')}" for k, v in q.items())
    tail = "/" + "/".join(quote(s, safe="") for s in path.split("/")) if path else ""
    return (
        f"{call.base_url()}/api/{call.p['T']}/{call.p['ns']}/{call.p['name']}/{what}/{commit_id}{tail}?{qs}"
    )


def paginate(call: Call, items: list, link_for) -> tuple[list, dict]:
    """One page of `items` from the `cursor` query param, plus a `Link` header when more follow."""
    raw = call.request.query_params.get("cursor", "0")
    if not raw.isdigit():
        raise HubError("BadRequest", f"cursor must be a non-negative integer, got {raw!r}")
    start, size = int(raw), call.hub.config.page_size
    page = items[start : start + size]
    headers = {}
    if start + size < len(items):
        headers["Link"] = f'<{link_for(start + size)}>; rel="next"'
    return page, headers


def _flag(call: Call, name: str) -> bool:
    return call.request.query_params.get(name, "false").lower() in ("1", "true")


def list_tree(call: Call):
    repo = call.repo()
    commit_id = call.hub.store.resolve(repo, call.p["rev"])
    folder = call.p.get("path", "").strip("/")
    entries = mf.tree(call.hub.store.manifest(repo, commit_id), folder, _flag(call, "recursive"))
    page, headers = paginate(call, entries, lambda c: _page_link(call, commit_id, "tree", folder, c))
    return ok(page, headers=headers)


MAX_PATHS_INFO = 10_000
# Whole GETs of files up to this size are read by the handler's worker thread and sent in one piece;
# FileResponse would add three thread hops (open, read, close) per request, most of a small download's cost.
SMALL_FILE_BYTES = 1024 * 1024


def paths_info(call: Call):
    repo = call.repo()
    commit_id = call.hub.store.resolve(repo, call.p["rev"])
    if "json" in call.request.headers.get("content-type", ""):
        paths = call.json().get("paths", [])
    else:
        paths = parse_qs(call.raw.decode("utf-8", "replace"), max_num_fields=MAX_PATHS_INFO + 1).get(
            "paths", []
        )
    if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
        raise HubError(
            "BadRequest", 'paths-info takes {"paths": [<path>, ...]} (JSON) or paths=<path> (form)'
        )
    if len(paths) > MAX_PATHS_INFO:
        raise HubError(
            "BadRequest", f"paths-info takes at most {MAX_PATHS_INFO} paths per request; split the list"
        )
    manifest = call.hub.store.manifest(repo, commit_id)
    out = [e for e in (mf.entry_json(manifest, p.strip("/")) for p in paths) if e is not None]
    return ok(out)


class BlobResponse(FileResponse):
    """A blob as a file body (Range, HEAD, If-Range by starlette), read in 1 MiB chunks."""

    chunk_size = 1024 * 1024

    @classmethod
    def check_range(cls, header: str | None, size: int) -> None:
        """416/400 in the hub's error format for a Range starlette would refuse in plain text."""
        if not header:
            return
        try:
            cls._parse_range_header(header, size)
        except RangeNotSatisfiable:
            raise HubError(
                "RangeNotSatisfiable",
                f"range {header!r} is outside the file of {size} bytes",
                headers={"Content-Range": f"bytes */{size}"},
            ) from None
        except MalformedRangeHeader as e:
            raise HubError("BadRequest", f"malformed Range header {header!r}: {e.content}") from None


def resolve_file(call: Call):
    with db.reading(call.hub.store.engine):  # the repo, the ref and (once) the manifest: one transaction
        repo = call.repo()
        commit_id = call.hub.store.resolve(repo, call.p["rev"])
        path = call.p["path"]
        entry = call.hub.store.manifest(repo, commit_id).get(path)
    if entry is None:
        raise HubError(
            "EntryNotFound",
            f"Entry Not Found: {path!r} does not exist at revision {call.p['rev']!r}",
            headers={"X-Repo-Commit": commit_id},
        )
    etag = f'"{entry.oid}"'
    headers = {
        "X-Repo-Commit": commit_id,
        "ETag": etag,
        "Cache-Control": _cache_control(call, repo, commit_id),
    }
    if entry.lfs:
        headers["X-Linked-Etag"] = f'"{entry.sha256}"'
        headers["X-Linked-Size"] = str(entry.size)
    if_range = call.request.headers.get("if-range")
    if if_range is None or if_range == etag:
        BlobResponse.check_range(call.request.headers.get("range"), entry.size)
    if not call.hub.blobs.local_files:
        return _object_response(call, entry, headers, if_range in (None, etag))
    stat = call.hub.blob_check.stat(entry.sha256, entry.size)
    prefix = call.hub.config.accel_prefix
    if (
        prefix
    ):  # nginx streams the blob from `<prefix>/<aa>/<sha256>`; Range and HEAD are its (docs/SERVING.md)
        headers["X-Accel-Redirect"] = f"{prefix.rstrip('/')}/{entry.sha256[:2]}/{entry.sha256}"
        return Response(b"", headers=headers, media_type="application/octet-stream")
    if (
        call.request.method == "GET"
        and entry.size <= SMALL_FILE_BYTES
        and "range" not in call.request.headers
    ):
        with open(stat.path, "rb") as f:  # already in a worker thread: one read, no more thread hops
            body = f.read()
        if len(body) == entry.size:
            return Response(body, headers=headers, media_type="application/octet-stream")
        raise HubError("BlobDamaged", f"blob {entry.sha256} changed while it was read; retry")
    return BlobResponse(
        stat.path,
        headers=headers,
        media_type="application/octet-stream",
        stat_result=os.stat(stat.path),
    )


def _cache_control(call: Call, repo, commit_id: str) -> str:
    """Who may keep this answer (docs/SERVING.md "A cache in front"). A file named by its full commit id in a
    public repo is the same for everyone, for ever: shared caches may keep it `shared_cache_s`. A branch's file
    changes with the next publish (`no-cache`: ask again each time), a private repo's is the requester's."""
    if repo.private:
        return "private"
    if call.p["rev"] != commit_id or call.hub.config.shared_cache_s <= 0:
        return "no-cache"
    return f"public, max-age={call.hub.config.shared_cache_s}"


REDIRECT_TTL_S = 3600  # a presigned URL outlives slow downloads, and names one immutable blob anyway


def _object_response(call: Call, entry, headers: dict, range_applies: bool) -> Response:
    """A blob without a local file (an object store): with `--accel-redirect`, an X-Accel-Redirect that has
    nginx fetch it from the store; else one ranged GET streamed through in chunks (its answer's size is the
    blob check), or with `--blob-redirect` a 302 to a presigned URL (HEAD is always answered here, with the
    usual headers, after a stat)."""
    headers = {**headers, "Accept-Ranges": "bytes", "Content-Type": "application/octet-stream"}
    start, end, status = 0, entry.size - 1, 200
    header = call.request.headers.get("range")
    ranges = BlobResponse._parse_range_header(header, entry.size) if header and range_applies else []
    if len(ranges) == 1:  # several ranges: the whole file, as RFC 9110 allows
        (start, stop), status = ranges[0], 206
        end = stop - 1
        headers["Content-Range"] = f"bytes {start}-{end}/{entry.size}"
    prefix = call.hub.config.accel_prefix
    if prefix and BLOB_CHECK_HEADER not in call.request.headers:
        answer = _accel_object(call, entry, headers, prefix, (start, end) if status == 206 else None)
        if answer is not None:
            return answer
    elif prefix:  # nginx's second try, after the store refused its read: this one is read and checked here
        call.hub.blob_check.forget(entry.sha256)
    headers["Content-Length"] = str(end - start + 1)
    if call.request.method == "HEAD" or call.hub.config.blob_redirect:
        call.hub.blob_check.stat(entry.sha256, entry.size)  # no GET of ours will see the size
    if call.request.method == "GET" and call.hub.config.blob_redirect:
        url = call.hub.blobs.presign(entry.sha256, REDIRECT_TTL_S)
        if url:  # the client fetches the bytes (and its Range) from the object store itself
            moved = {k: v for k, v in headers.items() if not k.startswith("Content-")}
            return Response(b"", status_code=302, headers={**moved, "Location": url})
    if call.request.method == "HEAD":
        return Response(b"", status_code=status, headers=headers)
    # Before the answer: an outage is a 503 and a wrong size a BlobDamaged, never a cut 200.
    reader = call.hub.blob_check.open(entry.sha256, entry.size, start, end)
    return StreamingResponse(_stream(reader), status_code=status, headers=headers)


# nginx uses the URL at once; the margin covers clocks that differ between replica and object store.
ACCEL_TTL_S = 600
# Sent by nginx's `@blob_check` location (docs/SERVING.md) when the store refused a redirected read.
BLOB_CHECK_HEADER = "x-kernel-hub-blob-check"


def _accel_object(call: Call, entry, headers: dict, prefix: str, byte_range) -> Response | None:
    """`--accel-redirect` on an object store: nginx fetches the bytes from the store itself. The answer names
    a presigned path of the object (for this request's method) under nginx's internal `prefix` location, the
    range to ask for (`X-Blob-Range`, already checked against the committed size) and the ETag the object must
    have (`X-Blob-If-Match`, recorded after a size check; the store refuses any other object with a 412, and
    nginx then asks a replica again with `X-Kernel-Hub-Blob-Check`, answered by a checked read here: BlobDamaged,
    StorageUnavailable or the bytes). None: the store has no presigned URLs or ETags; stream it here."""
    etag = call.hub.blob_check.store_etag(entry.sha256, entry.size)
    url = etag and call.hub.blobs.presign(entry.sha256, ACCEL_TTL_S, call.request.method)
    if not url:
        return None
    where = urlsplit(url)
    moved = {  # the store's answer carries these
        k: v for k, v in headers.items() if not k.startswith("Content-") and k != "Accept-Ranges"
    }
    moved["X-Accel-Redirect"] = f"{prefix.rstrip('/')}{where.path}?{where.query}"
    moved["X-Blob-If-Match"] = etag
    if byte_range is not None:
        moved["X-Blob-Range"] = f"bytes={byte_range[0]}-{byte_range[1]}"
    return Response(b"", headers=moved)


def _stream(reader):
    with reader:
        yield from reader


RESOLVE = "{rev}/{path:path}"
ROUTES = [
    route("GET", "api/{T}/{ns}/{name}/tree/{rev}/{path:path}", list_tree),
    route("POST", "api/{T}/{ns}/{name}/paths-info/{rev}", paths_info),
    route("GET HEAD", "kernels/{ns}/{name}/resolve/" + RESOLVE, resolve_file, T="kernels"),
    route("GET HEAD", "{ns}/{name}/resolve/" + RESOLVE, resolve_file, T="models"),
]
