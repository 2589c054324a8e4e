"""The ASGI app: one Starlette catch-all route that dispatches on the raw path (see routing.py)
and turns HubError into the answers of errors.ERROR_TABLE.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Route as StarletteRoute

from . import commits, files, lfs, orgs, pages, refs, repos
from .errors import HubError
from .routing import find, split_raw_path
from .storage import db
from .storage.accounts import Accounts
from .storage.blobs import BlobStore
from .storage.repos import RepoStore
from .web import Call, Hub, HubConfig, error_response

log = logging.getLogger("kernel_hub")

# Order matters: the first match wins. Literal routes (api/organizations/..., api/kernel-hub/...) come
# before `api/{T}/{ns}/{name}`, and the model routes `{ns}/{name}/...` come last.
ROUTES = [*orgs.ROUTES, *lfs.ROUTES, *repos.ROUTES, *refs.ROUTES, *files.ROUTES, *commits.ROUTES, *pages.ROUTES]
ROUTES.sort(key=lambda r: r.pattern[:1] == ("{ns}",))
METHODS = ["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"]


def open_hub(data_dir: Path, config: HubConfig, db_url: str | None = None) -> Hub:
    engine = db.connect(db_url or data_dir)
    accounts = Accounts(engine)
    return Hub(RepoStore(engine), accounts, BlobStore(Path(data_dir) / "blobs"), config, accounts.secret())


def create_app(data_dir: Path, public_url: str | None = None, config: HubConfig | None = None) -> Starlette:
    cfg = config or HubConfig()
    if public_url:
        cfg = replace(cfg, public_url=public_url)
    hub = open_hub(Path(data_dir), cfg)

    async def dispatch(request: Request):
        try:
            segs = split_raw_path(request.scope.get("raw_path") or request.scope["path"].encode())
        except UnicodeDecodeError:
            return error_response(HubError("BadRequest", "the request path is not valid UTF-8 after percent-decoding"))
        route, params, path_matched = find(ROUTES, request.method, segs)
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
            log.exception("internal error on %s %s", request.method, request.url.path)
            return error_response(HubError("Internal", "internal server error; see the hub log"))

    app = Starlette(routes=[StarletteRoute("/{path:path}", dispatch, methods=METHODS)])
    app.state.hub = hub
    return app
