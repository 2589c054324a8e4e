"""The ASGI app: every HTTP request goes through `HubApp.__call__`, which routes on the raw path
(routing.py), runs the handler off the event loop, and turns every failure into the answers of
errors.ERROR_TABLE. No request reaches a Starlette router or error page, so every path gets the hub's
error format (a `%0a` in a path included).

Handlers are plain functions run in the thread pool (SQLite, hashing and parsing never block the
loop); their request body, if any, is read here first, bounded and with an idle timeout. The two
streaming handlers (the NDJSON commit and the LFS PUT) are coroutines that offload their own work.
"""

from __future__ import annotations

import inspect
import logging
import uuid
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send
from uvicorn.protocols.utils import ClientDisconnected

from . import commits, files, home, lfs, orgs, pages, refs, repos
from .access_log import AccessLog
from .errors import HubError
from .pages import PageSection
from .routing import find, split_raw_path
from .storage import Storage, open_storage
from .storage.accounts import Accounts
from .storage.errors import storage_full, unavailable
from .storage.repos import RepoStore
from .web import Call, Hub, HubConfig, error_response

log = logging.getLogger(__name__)

# Order matters: the first match wins. Literal routes (api/organizations/..., api/kernel-hub/...) come
# before `api/{T}/{ns}/{name}`, and the model routes `{ns}/{name}/...` come last.
ROUTES = [
    *orgs.ROUTES,
    *lfs.ROUTES,
    *repos.ROUTES,
    *refs.ROUTES,
    *files.ROUTES,
    *commits.ROUTES,
    *pages.ROUTES,
    *home.ROUTES,
]
ROUTES.sort(key=lambda r: r.pattern[:1] == ("{ns}",))
# Our routes beyond the HF Hub API (docs/HUB_PROTOCOL.md): left out when HubConfig.extension_routes is False.
EXTENSION_HANDLERS = frozenset({orgs.list_keys, orgs.add_key, refs.ref_update})
# Public data answered even for an unknown token (as for no token): stock `kernels` turns any error of its
# trust check into "could not verify publisher trust status", so a wrong HF_TOKEN must fail at its next
# request instead, whose 401 huggingface_hub reports as such.
UNKNOWN_TOKEN_OK = frozenset({orgs.overview})
BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# Staging files older than this are a crashed writer's for certain (longer than any request may take).
STAGING_MAX_AGE_S = 24 * 3600


def open_hub(storage: Storage, config: HubConfig, extensions: Sequence[PageSection] = ()) -> Hub:
    accounts = Accounts(storage.engine)
    storage.blobs.clean_staging(STAGING_MAX_AGE_S)  # start-up recovery: temp files of crashed processes
    return Hub(
        RepoStore(storage.engine), accounts, storage.blobs, config, accounts.secret(), tuple(extensions)
    )


class HubApp:
    """The hub as an ASGI application (HTTP and lifespan); `.hub` holds its stores and config."""

    def __init__(self, hub: Hub):
        self.hub = hub
        ext = hub.config.extension_routes
        self.routes = ROUTES if ext else [r for r in ROUTES if r.handler not in EXTENSION_HANDLERS]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return  # websockets: not served; the server closes the connection
        request = Request(scope, receive)
        request_id = uuid.uuid4().hex
        try:
            response = await self._answer(request, request_id)
            if response is None:
                return
            response.headers["X-Request-Id"] = request_id  # the client quotes it in its error messages
            await response(scope, receive, send)  # an answer cut short by the client: access_log.py says so
        except (ClientDisconnect, ClientDisconnected, ConnectionError) as e:
            # The client went away mid-request or mid-answer: nothing to answer, nothing broken.
            log.info("client disconnected %s on %s %s (%r)", request_id, request.method, _path(request), e)
        except OSError as e:  # after the headers went out (a blob removed mid-read): only the log can say
            log.error("answer %s on %s %s cut short: %s", request_id, request.method, _path(request), e)

    async def _answer(self, request: Request, request_id: str) -> Response | None:
        try:
            segs = split_raw_path(request.scope.get("raw_path") or request.scope["path"].encode())
        except UnicodeDecodeError:
            return error_response(
                HubError("BadRequest", "the request path is not valid UTF-8 after percent-decoding")
            )
        route, params, path_matched = find(self.routes, request.method, segs)
        try:
            if route is None and request.method == "GET" and "text/html" in request.headers.get("accept", ""):
                return pages.not_found(HubError("NotFound", f"there is no page at {_path(request)}"))
            if route is None:
                kind = "MethodNotAllowed" if path_matched else "NotFound"
                raise HubError(kind, f"no {request.method} endpoint at {_path(request)} on this hub")
            call = Call(self.hub, request, params)
            if inspect.iscoroutinefunction(route.handler):
                await run_in_threadpool(call.authenticate, route.handler in UNKNOWN_TOKEN_OK)
                return await route.handler(call)
            if request.method in BODY_METHODS:
                call.raw = await call.body(self.hub.config.max_json_bytes)
            return await run_in_threadpool(_run, route.handler, call)
        except HubError as e:
            return error_response(e)
        except ClientDisconnect:
            raise
        except Exception as e:
            if (full := storage_full(e)) is not None:
                log.error("storage full %s on %s %s: %s", request_id, request.method, _path(request), e)
                return error_response(full)
            if (outage := unavailable(e)) is not None:
                log.warning(
                    "storage unavailable %s on %s %s: %s", request_id, request.method, _path(request), e
                )
                return error_response(outage)
            log.exception("internal error %s on %s %s", request_id, request.method, _path(request))
            return error_response(
                HubError("Internal", f"internal server error {request_id}; see the hub log")
            )


def _run(handler, call: Call) -> Response:
    call.authenticate(handler in UNKNOWN_TOKEN_OK)
    return handler(call)


def _path(request: Request) -> str:
    """The path as the client sent it (still percent-encoded: safe for a log line)."""
    raw = request.scope.get("raw_path") or request.scope["path"].encode()
    return raw.decode("latin-1")


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


def create_app(
    data_dir: Path | None = None,
    public_url: str | None = None,
    config: HubConfig | None = None,
    extensions: Sequence[PageSection] = (),
    *,
    storage: Storage | None = None,
) -> AccessLog:
    """The hub as an ASGI app on `storage` (default: the embedded one under `data_dir`), one log line per request
    (`access_log`); `extensions` are HTML blocks its kernel pages show under each version."""
    cfg = config or HubConfig()
    if public_url:
        cfg = replace(cfg, public_url=public_url)
    return AccessLog(HubApp(open_hub(storage or open_storage(Path(data_dir)), cfg, extensions=extensions)))
