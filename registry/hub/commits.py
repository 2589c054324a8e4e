"""Commit routes: commit listing, preupload, the NDJSON commit, validate-yaml.
docs/HUB_PROTOCOL.md §2-4.
"""

from __future__ import annotations

import base64
import binascii

import yaml
from starlette.concurrency import run_in_threadpool

from . import validate
from .errors import HubError
from .files import paginate
from .manifest import FileEntry, Op
from .repos import iso
from .routing import route
from .storage.blobs import StagedBlob
from .web import Call, ok, parse_json

MAX_PREUPLOAD_FILES = 1000
LFS_OPT_IN_HEADER = "x-kernel-hub-lfs"  # HfApi(headers={"X-Kernel-Hub-Lfs": "1"}) with HF_HUB_DISABLE_XET=1
OPT_IN_LFS_THRESHOLD = 10 * 1024 * 1024


def list_commits(call: Call):
    repo = call.repo()
    commit_id = call.hub.store.resolve(repo, call.p["rev"])
    history = call.hub.store.history(repo, commit_id)
    base = f"{call.base_url()}/api/{call.p['T']}/{repo.repo_id}/commits/{commit_id}"
    page, headers = paginate(call, history, lambda c: f"{base}?cursor={c}")
    out = [
        {
            "id": c.id,
            "title": c.title,
            "message": c.message,
            "authors": [{"user": c.author}],
            "date": iso(c.created_at),
            "formatted": {"title": c.title, "message": c.message},
        }
        for c in page
    ]
    return ok(out, headers=headers)


def lfs_threshold(server_threshold: int | None, client_opts_in: bool) -> int | None:
    """The size from which preupload answers `lfs`; None: every file goes inline (`regular`).

    The default clients switch to Xet for any `lfs` answer and this hub does not speak Xet
    (docs/HUB_PROTOCOL.md §4), and nothing in a request says whether Xet is off. So LFS is opt-in:
    per server (`serve --lfs-threshold`, its publishers set HF_HUB_DISABLE_XET=1) or per client
    (the `X-Kernel-Hub-Lfs: 1` header, sent by a client that has Xet off).
    """
    if server_threshold is not None:
        return server_threshold
    return OPT_IN_LFS_THRESHOLD if client_opts_in else None


def upload_mode(size: int, threshold: int | None) -> str:
    return "lfs" if threshold is not None and size > 0 and size >= threshold else "regular"


def preupload(call: Call):
    repo = call.repo(write=True)
    body = call.json()
    files = body.get("files")
    if not isinstance(files, list) or len(files) > MAX_PREUPLOAD_FILES:
        raise HubError("BadRequest", f"'files' must be a list of at most {MAX_PREUPLOAD_FILES} entries")
    commit_id = call.hub.store.resolve(repo, call.p["rev"])
    manifest = call.hub.store.manifest(repo, commit_id)
    opt_in = call.request.headers.get(LFS_OPT_IN_HEADER, "").lower() in ("1", "true", "yes")
    threshold = lfs_threshold(call.hub.config.lfs_threshold, opt_in)
    out = []
    for f in files:
        if not isinstance(f, dict) or not isinstance(f.get("size"), int) or f["size"] < 0:
            raise HubError(
                "BadRequest", f"each file needs a 'path' and a non-negative integer 'size', got {f!r}"
            )
        path = validate.file_path(f.get("path"))
        mode = upload_mode(f["size"], threshold)
        current = manifest.get(path)
        same_kind = current is not None and current.lfs == (mode == "lfs")
        out.append(
            {
                "path": path,
                "uploadMode": mode,
                "shouldIgnore": False,
                "oid": current.oid if same_kind else None,
            }
        )
    return ok({"files": out, "commitOid": commit_id})


class CommitParser:
    """Turns NDJSON lines into a header and Ops, staging inline content as blobs on the way."""

    def __init__(self, call: Call, repo):
        self.call, self.repo = call, repo
        self.header: dict | None = None
        self.ops: list[Op] = []
        self.staged: list[StagedBlob] = []
        self.lineno = 0

    def feed(self, lines: list[bytes]) -> None:
        """Parse complete lines (run in a worker thread: JSON, base64 and hashing are CPU work)."""
        for line in lines:
            self._line(line)

    def _line(self, line: bytes) -> None:
        self.lineno += 1
        if not line.strip():
            return
        obj = parse_json(line, f"commit line {self.lineno}", self.call.hub.config.max_json_depth)
        key = obj.get("key") if isinstance(obj, dict) else None
        value = obj.get("value") if isinstance(obj, dict) else None
        if not isinstance(key, str) or not isinstance(value, dict):
            raise HubError(
                "BadRequest",
                f"commit line {self.lineno} is not a JSON object {{key: <str>, value: <object>}}",
            )
        if self.header is None and key != "header":
            raise HubError(
                "BadRequest", f"commit line {self.lineno}: the first line must be the header, got {key!r}"
            )
        if key == "header":
            self._header(value)
        elif key == "file":
            self._file(value)
        elif key == "lfsFile":
            self._lfs_file(value)
        elif key in ("deletedFile", "deletedFolder"):
            self.ops.append(Op(key, validate.file_path(value.get("path"))))
        else:
            raise HubError("BadRequest", f"commit line {self.lineno}: unknown operation {key!r}")

    def _header(self, value: dict) -> None:
        if self.header is not None:
            raise HubError("BadRequest", f"commit line {self.lineno}: a second header")
        summary = value.get("summary")
        if not isinstance(summary, str) or not summary.strip():
            raise HubError("BadRequest", "the commit header needs a non-empty 'summary' (the commit title)")
        parent = value.get("parentCommit")
        if parent is not None and (not isinstance(parent, str) or not validate.HEX_PREFIX.match(parent)):
            raise HubError("BadRequest", f"parentCommit must be 5-40 lowercase hex digits, got {parent!r}")
        description = value.get("description") or ""
        if not isinstance(description, str):
            raise HubError("BadRequest", "the commit header's 'description' must be a string")
        self.header = {"summary": summary.strip(), "description": description, "parent": parent}

    def _file(self, value: dict) -> None:
        path = validate.file_path(value.get("path"))
        content, encoding = value.get("content"), value.get("encoding", "base64")
        if not isinstance(content, str) or encoding not in ("base64", "utf-8"):
            raise HubError(
                "BadRequest", f"file {path!r}: 'content' must be a string with encoding base64 or utf-8"
            )
        try:
            data = _b64decode(content) if encoding == "base64" else content.encode()
        except binascii.Error:
            raise HubError("BadRequest", f"file {path!r}: content is not valid base64") from None
        blob = self.call.hub.blobs.stage_bytes(data)
        self.staged.append(blob)
        self.ops.append(Op("file", path, FileEntry(blob.sha256, blob.size, blob.sha1, False)))

    def _lfs_file(self, value: dict) -> None:
        path = validate.file_path(value.get("path"))
        oid = validate.sha256_hex(value.get("oid"))
        if value.get("algo", "sha256") != "sha256":
            raise HubError("BadRequest", f"lfsFile {path!r}: only algo sha256 is supported")
        known = self.call.hub.store.lfs_size(self.repo, oid)
        if known is None or not self.call.hub.blobs.exists(oid):
            raise HubError(
                "UnknownLfsObject",
                f"lfsFile {path!r}: LFS object {oid} was not uploaded to {self.repo.repo_id}; upload it "
                "through the LFS batch API first",
            )
        size = value.get("size")
        if size is not None and (not isinstance(size, int) or size != known):
            raise HubError(
                "LfsObjectMismatch", f"lfsFile {path!r}: size {size} differs from the stored {known}"
            )
        self.ops.append(Op("file", path, FileEntry(oid, known, oid, True)))

    def discard(self) -> None:
        for blob in self.staged:
            self.call.hub.blobs.discard(blob)

    def promote(self) -> None:
        self.call.hub.blobs.promote(*self.staged)  # one call: one lease transaction, parallel uploads


B64_SLICE = 4 * 1024 * 1024  # characters, a multiple of 4


def _b64decode(text: str) -> bytes:
    """Strict base64 in slices: one call on 64 MiB would hold the GIL (and stall the event loop) ~0.1 s."""
    return b"".join(
        base64.b64decode(text[i : i + B64_SLICE], validate=True) for i in range(0, len(text), B64_SLICE)
    )


async def _parse(call: Call, parser: CommitParser) -> None:
    """Feed the NDJSON body to `parser` line by line; the parsing runs in worker threads."""
    stream = call.stream(call.hub.config.max_commit_bytes)
    buf = bytearray()
    try:
        async for chunk in stream:
            buf += chunk
            nl = chunk.rfind(b"\n")  # search the new chunk only: one huge line stays linear
            if nl >= 0:
                end = len(buf) - len(chunk) + nl
                lines = bytes(buf[:end]).split(b"\n")
                del buf[: end + 1]
                await run_in_threadpool(parser.feed, lines)
        await run_in_threadpool(parser.feed, [bytes(buf)])
        if parser.header is None:
            raise HubError("BadRequest", "empty commit body: expected NDJSON starting with a header line")
    except HubError as e:
        if e.kind not in ("PayloadTooLarge", "RequestTimeout"):
            try:
                async for _ in stream:  # drain (bounded by the stream), so the client reads our answer
                    pass
            except HubError:
                pass
        raise


def _commit_target(call: Call):
    """(repo, branch) of a commit request, checked before its body is read."""
    repo = call.repo(write=True)
    if call.request.query_params.get("create_pr") in ("1", "true", "True"):
        raise HubError("BadRequest", "pull requests are not supported by this hub; commit to a branch")
    rev = call.p["rev"]
    branch = rev.removeprefix("refs/heads/")
    if call.hub.store.ref(repo, "branch", branch) is None:
        raise HubError(
            "RevisionNotFound", f"branch {rev!r} does not exist in {repo.repo_id}; commits go to a branch"
        )
    return repo, branch


async def commit(call: Call):
    """The NDJSON commit: streamed (up to max_commit_bytes), so it stays a coroutine."""
    repo, branch = await run_in_threadpool(_commit_target, call)
    parser = CommitParser(call, repo)
    try:
        await _parse(call, parser)
        h = parser.header
        commit_id = await run_in_threadpool(
            call.hub.store.commit,
            repo,
            branch,
            parser.ops,
            title=h["summary"],
            message=h["description"],
            author=call.principal.user,
            parent_prefix=h["parent"],
            before_write=parser.promote,
        )
    finally:
        await run_in_threadpool(parser.discard)  # no-op for promoted blobs (their temp files are gone)
    url = f"{call.repo_url(repo)}/commit/{commit_id}"
    return ok({"success": True, "commitOid": commit_id, "commitUrl": url, "commitMessage": h["summary"]})


MAX_FRONT_MATTER_BYTES = 256 * 1024
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: fast, and it bounds nesting


def validate_yaml(call: Call):
    """Checks the README front matter parses as a YAML mapping. Errors are JSON too (row 21)."""
    body = call.json()
    content = body.get("content")
    if not isinstance(content, str):
        raise HubError("BadRequest", "'content' must be the README text")
    errors = []
    if content.startswith("---"):
        end = content.find("\n---", 3)
        if end < 0:
            errors.append({"message": "the YAML front matter starting with '---' is not closed by '---'"})
        elif end > MAX_FRONT_MATTER_BYTES:
            raise HubError(
                "PayloadTooLarge",
                f"the YAML front matter is {end} characters; at most {MAX_FRONT_MATTER_BYTES} are checked here",
            )
        else:
            try:
                meta = yaml.load(content[3:end], Loader=_YAML_LOADER)  # a safe loader (Safe or CSafe)
                if meta is not None and not isinstance(meta, dict):
                    errors.append({"message": "the YAML front matter must be a mapping (key: value)"})
            except (yaml.YAMLError, RecursionError) as e:
                errors.append({"message": f"invalid YAML front matter: {e}"})
    if errors:
        raise HubError("BadRequest", errors[0]["message"], body={"errors": errors, "warnings": []})
    return ok({"errors": [], "warnings": []})


ROUTES = [
    route("GET", "api/{T}/{ns}/{name}/commits/{rev:path}", list_commits),
    route("POST", "api/{T}/{ns}/{name}/preupload/{rev:path}", preupload),
    route("POST", "api/{T}/{ns}/{name}/commit/{rev:path}", commit),
    route("POST", "api/validate-yaml", validate_yaml),
]
