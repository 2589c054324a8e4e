"""File routes: tree listings (paginated with `Link`), paths-info, and resolve HEAD/GET with Range.
docs/HUB_PROTOCOL.md §2 (tree, paths-info, resolve).
"""

from __future__ import annotations

import json
from urllib.parse import parse_qs, quote

from starlette.responses import Response, StreamingResponse

from . import manifest as mf
from .errors import HubError
from .routing import route
from .web import Call, ok

CHUNK = 1024 * 1024


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


async def list_tree(call: Call):
    repo = call.repo()
    commit_id = call.hub.store.resolve(repo, call.p["rev"])
    folder = call.p.get("path", "").strip("/")
    entries = mf.tree(call.hub.store.manifest(repo, commit_id), folder, _flag(call, "recursive"))
    page, headers = paginate(call, entries, lambda c: _page_link(call, commit_id, "tree", folder, c))
    return ok(page, headers=headers)


async def paths_info(call: Call):
    repo = call.repo()
    commit_id = call.hub.store.resolve(repo, call.p["rev"])
    raw = await call.body(call.hub.config.max_json_bytes)
    ctype = call.request.headers.get("content-type", "")
    if "json" in ctype:
        try:
            paths = json.loads(raw).get("paths", [])
        except (ValueError, AttributeError):
            raise HubError(
                "BadRequest", 'paths-info body must be JSON {"paths": [...]} or form paths=...'
            ) from None
    else:
        paths = parse_qs(raw.decode("utf-8", "replace")).get("paths", [])
    manifest = call.hub.store.manifest(repo, commit_id)
    out = [e for e in (mf.entry_json(manifest, str(p).strip("/")) for p in paths) if e is not None]
    return ok(out)


def parse_range(header: str | None, size: int) -> tuple[int, int] | None:
    """(start, end inclusive) of a single `bytes=` range, None for the whole file; 416 if unsatisfiable."""
    if not header:
        return None
    unit, _, spec = header.partition("=")
    if unit.strip() != "bytes" or "," in spec:
        return None  # unsupported forms are answered with the whole file, as RFC 9110 allows
    first, _, last = spec.strip().partition("-")
    try:
        if first == "":
            n = int(last)
            start, end = max(size - n, 0), size - 1
        else:
            start = int(first)
            end = min(int(last), size - 1) if last else size - 1
    except ValueError:
        return None
    if start >= size or start > end or start < 0:
        raise HubError(
            "RangeNotSatisfiable",
            f"range {header!r} is outside the file of {size} bytes",
            headers={"Content-Range": f"bytes */{size}"},
        )
    return start, end


async def resolve_file(call: Call):
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
    headers = {
        "X-Repo-Commit": commit_id,
        "ETag": f'"{entry.oid}"',
        "Accept-Ranges": "bytes",
        "Content-Type": "application/octet-stream",
    }
    if entry.lfs:
        headers["X-Linked-Etag"] = f'"{entry.sha256}"'
        headers["X-Linked-Size"] = str(entry.size)
    span = parse_range(call.request.headers.get("range"), entry.size)
    start, end = span if span else (0, entry.size - 1)
    status = 206 if span else 200
    if span:
        headers["Content-Range"] = f"bytes {start}-{end}/{entry.size}"
    headers["Content-Length"] = str(end - start + 1)
    if call.request.method == "HEAD":
        return Response(b"", status_code=status, headers=headers)
    return StreamingResponse(_read(call, entry.sha256, start, end), status_code=status, headers=headers)


def _read(call: Call, sha256: str, start: int, end: int):
    with call.hub.blobs.open(sha256) as f:
        f.seek(start)
        left = end - start + 1
        while left > 0:
            chunk = f.read(min(CHUNK, left))
            if not chunk:
                break
            left -= len(chunk)
            yield chunk


RESOLVE = "{rev}/{path:path}"
ROUTES = [
    route("GET", "api/{T}/{ns}/{name}/tree/{rev}/{path:path}", list_tree),
    route("POST", "api/{T}/{ns}/{name}/paths-info/{rev}", paths_info),
    route("GET HEAD", "kernels/{ns}/{name}/resolve/" + RESOLVE, resolve_file, T="kernels"),
    route("GET HEAD", "{ns}/{name}/resolve/" + RESOLVE, resolve_file, T="models"),
]
