"""What every handler needs: the hub context (stores + config), the per-request `Call` (params,
auth, bounded body reads with an idle timeout, bounded JSON parsing, absolute URLs) and JSON/error
responses that are well-formed whatever the input.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass

from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response

from .blobcheck import BlobCheck
from .errors import HubError
from .storage.accounts import Accounts, Principal
from .storage.blobs import BlobStore
from .storage.repos import Repo, RepoStore
from .validate import REPO_TYPES, TYPE_PREFIX

MiB = 1024 * 1024


@dataclass(frozen=True)
class HubConfig:
    public_url: str | None = None  # absolute URLs in answers; else built from the request Host
    page_size: int = 1000  # tree and commits listings per page (the Hub's value)
    lfs_threshold: int | None = None  # preupload answers "lfs" at/above this size; None = always regular
    max_json_bytes: int = 8 * MiB
    max_json_depth: int = 64  # nesting of JSON bodies and commit lines (arrays + objects)
    max_commit_bytes: int = 512 * MiB
    max_lfs_bytes: int = 50 * 1024 * MiB
    # False: answer only the HF Hub API, without our key registry and ref-update (`serve --no-extensions`),
    # so publish and load are tested against a server that behaves like the real Hub.
    extension_routes: bool = True
    body_timeout_s: float = 30.0  # longest wait for the next chunk of a request body -> 408
    accel_prefix: str | None = (
        None  # nginx internal location of the blobs (X-Accel-Redirect); None: serve them here
    )
    blob_redirect: bool = False  # GET of a file: 302 to a presigned object-store URL where the store has one
    # How long a shared cache (nginx's proxy_cache, a CDN) may keep a file named by its commit in a public repo
    # (`Cache-Control: public, max-age`); 0: never. Those bytes never change; deleting the repo or making it
    # private reaches such a cache within this time.
    shared_cache_s: int = 60


# After this much past the limit, a too-large body is cut (413 + Connection: close) instead of drained.
DRAIN_LIMIT = 64 * MiB


@dataclass
class Hub:
    store: RepoStore
    accounts: Accounts
    blobs: BlobStore
    config: HubConfig
    secret: bytes  # HMAC key of signed LFS upload URLs
    extensions: tuple = ()  # pages.PageSection blocks added under each version of a kernel page
    blob_check: BlobCheck | None = None  # what serving verifies before sending a blob

    def __post_init__(self):
        if self.blob_check is None:
            self.blob_check = BlobCheck(self.blobs)


class Call:
    """One request: decoded path params, the caller, and helpers that refuse with HubError."""

    def __init__(self, hub: Hub, request: Request, params: dict[str, str]):
        self.hub = hub
        self.request = request
        self.p = params
        self.raw = b""  # the request body, read by the app before a plain (non-streaming) handler runs
        self._principal: Principal | None | bool = False

    # --- URLs ------------------------------------------------------------------------------------
    def base_url(self) -> str:
        if self.hub.config.public_url:
            return self.hub.config.public_url.rstrip("/")
        host = self.request.headers.get("host") or "127.0.0.1"
        return f"{self.request.url.scheme}://{host}"

    def repo_url(self, repo: Repo) -> str:
        prefix = "" if repo.type == "model" else TYPE_PREFIX[repo.type] + "/"
        return f"{self.base_url()}/{prefix}{repo.repo_id}"

    # --- auth ------------------------------------------------------------------------------------
    def authenticate(self, unknown_ok: bool = False) -> Principal | None:
        """The token's principal; None for anonymous calls; 401 for an unknown token (as on the Hub).

        `unknown_ok`: an unknown token counts as none (public data). The 401's X-Error-Message is the Hub's
        exact text, which huggingface_hub compares verbatim (else a 401 on a repo route reads as "Repository
        Not Found"); what to do goes in `error_description`, which it appends.
        """
        if self._principal is False:
            auth = self.request.headers.get("authorization", "")
            token = auth[7:].strip() if auth.lower().startswith("bearer ") else ""
            self._principal = self.hub.accounts.principal(token) if token else None
            if token and self._principal is None and not unknown_ok:
                raise HubError(
                    "Unauthorized",
                    "Invalid credentials in Authorization header",
                    body={"error_description": "unknown token; create one with `kernel-hub token create`"},
                )
        return self._principal

    @property
    def principal(self) -> Principal | None:
        return self.authenticate()

    def require_user(self) -> Principal:
        if self.principal is None:
            raise HubError(
                "Unauthorized", "This action needs a token: set HF_TOKEN (kernel-hub token create)"
            )
        return self.principal

    def require_write(self, namespace: str) -> Principal:
        who = self.require_user()
        if not who.can_write(namespace):
            raise HubError(
                "Forbidden",
                f"user {who.user!r} may not write to namespace {namespace!r}; use a token created with "
                f"--write {namespace}, or join the org",
            )
        return who

    def repo(self, *, write: bool = False) -> Repo:
        """The repo named by the path params `T`, `ns`, `name`, checked for read (or write) access."""
        type_ = REPO_TYPES.get(self.p.get("T", "kernels"))
        ns, name = self.p["ns"], self.p["name"]
        if write:
            self.require_write(ns)
        repo = self.hub.store.get(type_, ns, name) if type_ else None
        hidden = repo is not None and repo.private and not (self.principal and self.principal.can_write(ns))
        if repo is None or hidden:
            kind = type_ or self.p.get("T")
            raise HubError(
                "RepoNotFound",
                f"Repository Not Found for {kind} repo {ns}/{name}: check the name (and your token for "
                "private repos), or create it with create_repo first",
            )
        return repo

    # --- bodies ----------------------------------------------------------------------------------
    async def body(self, limit: int) -> bytes:
        declared = self.request.headers.get("content-length")
        buf = bytearray()
        async for chunk in self.stream(limit):
            buf += chunk
        if declared is not None and declared.isdigit() and int(declared) != len(buf):
            raise HubError("BadRequest", f"body length {len(buf)} differs from Content-Length {declared}")
        return bytes(buf)

    async def stream(self, limit: int) -> AsyncIterator[bytes]:
        """The body in chunks. 408 when the client pauses longer than `body_timeout_s`; 413 once it
        passes `limit` bytes (after draining up to DRAIN_LIMIT more, so an ordinary client reads the
        answer rather than a reset; an endless body is cut there)."""
        total = 0
        timeout = self.hub.config.body_timeout_s
        while True:
            try:
                message = await asyncio.wait_for(self.request.receive(), timeout)
            except TimeoutError:
                raise HubError(
                    "RequestTimeout",
                    f"the request body stalled for {timeout:g} s after {total} bytes; send it without pauses",
                    headers={"Connection": "close"},
                ) from None
            if message["type"] == "http.disconnect":
                raise ClientDisconnect()
            chunk = message.get("body", b"")
            total += len(chunk)
            more = message.get("more_body", False)
            if total > limit:
                if not more or total > limit + DRAIN_LIMIT:
                    raise HubError(
                        "PayloadTooLarge",
                        f"request body of {total}{'+' if more else ''} bytes exceeds the limit of {limit} bytes here",
                        headers={"Connection": "close"} if more else {},
                    )
                continue
            if chunk:
                yield chunk
            if not more:
                return

    def json(self) -> dict:
        """The body (read by the app) as a JSON object; 400 for anything else."""
        value = parse_json(self.raw or b"{}", "request body", self.hub.config.max_json_depth)
        if not isinstance(value, dict):
            raise HubError("BadRequest", "request body must be a JSON object")
        return value


def parse_json(raw: bytes | str, what: str, max_depth: int):
    """`raw` parsed as JSON, refused with 400 when invalid or nested deeper than `max_depth`."""
    try:
        value = json.loads(raw)
    except RecursionError:
        value = None
        too_deep = True
    except (ValueError, UnicodeDecodeError) as e:
        raise HubError("BadRequest", f"{what} is not valid JSON: {e}") from None
    else:
        opens = raw.count(b"[" if isinstance(raw, bytes) else "[") + raw.count(
            b"{" if isinstance(raw, bytes) else "{"
        )
        too_deep = opens > max_depth and _deeper_than(value, max_depth)
    if too_deep:
        raise HubError("BadRequest", f"{what} is nested deeper than {max_depth} levels of arrays/objects")
    return value


def _deeper_than(value, limit: int) -> bool:
    """Whether JSON `value` nests more than `limit` containers, level by level (no recursion)."""
    level, depth = [value], 0
    while level:
        level = [v for v in level if isinstance(v, (list, dict))]
        if not level:
            return False
        depth += 1
        if depth > limit:
            return True
        level = [c for v in level for c in (v.values() if isinstance(v, dict) else v)]
    return False


def ok(value, status: int = 200, headers: dict | None = None) -> Response:
    return JSONResponse(value, status_code=status, headers=headers)


MAX_MESSAGE_CHARS = 4000  # a message quotes the offending value; a huge value is cut
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def header_value(text: str, limit: int = 1000) -> str:
    """`text` as a valid HTTP header value: ASCII, control characters escaped (`\\x00`), cut at `limit`."""
    out = text.encode("ascii", "backslashreplace").decode("ascii")
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", out)[:limit]


def error_response(err: HubError) -> Response:
    """The JSON answer of a refused request; its headers are valid whatever the message quotes."""
    message = " ".join(err.message.split())
    if len(message) > MAX_MESSAGE_CHARS:
        message = message[:MAX_MESSAGE_CHARS] + "... (cut)"
    headers = {
        "X-Error-Code": err.code,
        "X-Error-Message": header_value(message),
        **{k: header_value(v) for k, v in err.headers.items()},
    }
    return JSONResponse({"error": message, **err.body}, status_code=err.status, headers=headers)
