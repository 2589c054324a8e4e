"""What every handler needs: the hub context (stores + config), the per-request `Call` (params,
auth, bounded body reads, absolute URLs) and JSON/error responses.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

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
    max_commit_bytes: int = 512 * MiB
    max_lfs_bytes: int = 50 * 1024 * MiB
    # False: answer only the HF Hub API, without our key registry and ref-update (`serve --no-extensions`),
    # so publish and load are tested against a server that behaves like the real Hub.
    extension_routes: bool = True


@dataclass
class Hub:
    store: RepoStore
    accounts: Accounts
    blobs: BlobStore
    config: HubConfig
    secret: bytes  # HMAC key of signed LFS upload URLs
    extensions: tuple = ()  # pages.PageSection blocks added under each version of a kernel page


class Call:
    """One request: decoded path params, the caller, and helpers that refuse with HubError."""

    def __init__(self, hub: Hub, request: Request, params: dict[str, str]):
        self.hub = hub
        self.request = request
        self.p = params
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
    def authenticate(self) -> Principal | None:
        """The token's principal; None for anonymous calls; 401 for an unknown token (as on the Hub)."""
        if self._principal is False:
            auth = self.request.headers.get("authorization", "")
            token = auth[7:].strip() if auth.lower().startswith("bearer ") else ""
            self._principal = self.hub.accounts.principal(token) if token else None
            if token and self._principal is None:
                raise HubError(
                    "Unauthorized",
                    "Invalid credentials in Authorization header: unknown token; "
                    "create one with `kernel-hub token create`",
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

    async def write(self, fn, *args, **kwargs):
        """Run a storage write in a worker thread: it may wait for the database write lock."""
        return await run_in_threadpool(fn, *args, **kwargs)

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
        """The body in chunks; PayloadTooLarge (after draining) once it passes `limit` bytes."""
        total = 0
        too_big = False
        async for chunk in self.request.stream():
            total += len(chunk)
            if total > limit:
                too_big = True
                continue  # drain the rest so the client reads our answer, not a reset connection
            yield chunk
        if too_big:
            raise HubError(
                "PayloadTooLarge", f"request body of {total} bytes exceeds the limit of {limit} bytes here"
            )

    async def json(self) -> dict:
        raw = await self.body(self.hub.config.max_json_bytes)
        try:
            value = json.loads(raw or b"{}")
        except (ValueError, UnicodeDecodeError) as e:
            raise HubError("BadRequest", f"request body is not valid JSON: {e}") from None
        if not isinstance(value, dict):
            raise HubError("BadRequest", "request body must be a JSON object")
        return value


def ok(value, status: int = 200, headers: dict | None = None) -> Response:
    return JSONResponse(value, status_code=status, headers=headers)


def error_response(err: HubError) -> Response:
    message = " ".join(err.message.split())
    headers = {
        "X-Error-Code": err.code,
        "X-Error-Message": message.encode("ascii", "replace").decode()[:1000],
        **err.headers,
    }
    return JSONResponse({"error": message, **err.body}, status_code=err.status, headers=headers)
