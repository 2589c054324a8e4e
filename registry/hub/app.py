"""The ASGI app: one Starlette catch-all route that dispatches on the raw path (see routing.py)
and turns HubError into the answers of errors.ERROR_TABLE.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route as StarletteRoute

from . import commits, files, lfs, orgs, pages, refs, repos
from .errors import HubError
from .pages import PageSection
from .routing import Route, find, split_raw_path
from .storage import db
from .storage.accounts import Accounts
from .storage.blobs import BlobStore
from .storage.repos import RepoStore
from .web import Call, Hub, HubConfig, error_response

log = logging.getLogger("kernel_hub")

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
]
ROUTES.sort(key=lambda r: r.pattern[:1] == ("{ns}",))
# Our routes beyond the HF Hub API (docs/HUB_PROTOCOL.md): left out when HubConfig.extension_routes is False.
EXTENSION_HANDLERS = frozenset({orgs.list_keys, orgs.add_key, refs.ref_update})
METHODS = ["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"]


def open_hub(
    data_dir: Path, config: HubConfig, db_url: str | None = None, extensions: Sequence[PageSection] = ()
) -> Hub:
    engine = db.connect(db_url or data_dir)
    accounts = Accounts(engine)
    blobs = BlobStore(Path(data_dir) / "blobs")
    return Hub(RepoStore(engine), accounts, blobs, config, accounts.secret(), tuple(extensions))


async def _answer(hub: Hub, routes: list[Route], request: Request, request_id: str) -> Response:
    try:
        segs = split_raw_path(request.scope.get("raw_path") or request.scope["path"].encode())
    except UnicodeDecodeError:
        return error_response(
            HubError("BadRequest", "the request path is not valid UTF-8 after percent-decoding")
        )
    route, params, path_matched = find(routes, request.method, segs)
    try:
        if route is None:
            kind = "MethodNotAllowed" if path_matched else "NotFound"
            raise HubError(kind, f"no {request.method} endpoint at {request.url.path} on this hub")
        call = Call(hub, request, params)
        call.authenticate()
        return await route.handler(call)
    except HubError as e:
        return error_response(e)
    except Exception:
        log.exception("internal error %s on %s %s", request_id, request.method, request.url.path)
        return error_response(HubError("Internal", f"internal server error {request_id}; see the hub log"))


def create_app(
    data_dir: Path,
    public_url: str | None = None,
    config: HubConfig | None = None,
    extensions: Sequence[PageSection] = (),
) -> Starlette:
    """The hub as an ASGI app; `extensions` are HTML blocks its kernel pages show under each version."""
    cfg = config or HubConfig()
    if public_url:
        cfg = replace(cfg, public_url=public_url)
    hub = open_hub(Path(data_dir), cfg, extensions=extensions)
    routes = ROUTES if cfg.extension_routes else [r for r in ROUTES if r.handler not in EXTENSION_HANDLERS]

    async def dispatch(request: Request):
        request_id = uuid.uuid4().hex
        response = await _answer(hub, routes, request, request_id)
        response.headers["X-Request-Id"] = request_id  # the client quotes it in its error messages
        return response

    app = Starlette(routes=[StarletteRoute("/{path:path}", dispatch, methods=METHODS)])
    app.state.hub = hub
    return app
