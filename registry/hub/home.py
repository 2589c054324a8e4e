"""The hub's overview pages: `/` and `/kernels` (every public kernel repo with its newest version, date, signing
key and whether its namespace is a trusted publisher), `/kernels/{ns}` (one namespace: trust, publisher keys,
repos), and `/{ns}/{name}` for a browser that typed a Hub-style repo URL (a kernel repo: a redirect to its page).

At most MAX_LISTED repos are listed, newest first, so a page stays small (tests hold every page under 50 KB).
"""

from __future__ import annotations

from starlette.responses import RedirectResponse

from registry.spec.names import KERNEL_REPO_TYPE

from . import pages
from .errors import HubError
from .routing import route
from .signer import signer_of
from .web import Call

MAX_LISTED = 100


def _summary(call: Call, repo, keys: dict[str, list[dict]], trusted: dict[str, bool]) -> dict:
    """What the listings show of one repo; `keys` and `trusted` cache per namespace across the page."""
    ns = repo.namespace
    if ns not in keys:
        keys[ns] = call.hub.accounts.keys(ns)
        org = call.hub.accounts.org(ns)
        trusted[ns] = bool(org and org["trusted"])
    view = {
        "repo_id": repo.repo_id,
        "url": f"/kernels/{repo.repo_id}",
        "trusted": trusted[ns],
        "latest": None,
    }
    versions = pages.version_heads(call, repo)
    if versions:
        n, commit = versions[0]
        store = call.hub.store
        manifest = store.manifest(repo, commit)
        created = store.get_commit(repo, commit).created_at
        view["latest"] = {
            "number": n,
            "url": f"/kernels/{repo.repo_id}/tree/v{n}",
            "date": pages.format_date(created),
            "created": created,
            "signer": signer_of(manifest, pages.reader(call, manifest), keys[ns]),
        }
    return view


def _listing(call: Call, namespace: str | None = None) -> tuple[list[dict], int]:
    """(summaries of the public kernel repos, newest version first; how many more were left out)."""
    repos = [
        r
        for r in call.hub.store.list()
        if not r.private and r.type == KERNEL_REPO_TYPE and namespace in (None, r.namespace)
    ]
    keys: dict[str, list[dict]] = {}
    trusted: dict[str, bool] = {}
    views = [_summary(call, r, keys, trusted) for r in repos]
    views.sort(key=lambda v: -(v["latest"]["created"] if v["latest"] else 0.0))
    return views[:MAX_LISTED], max(len(views) - MAX_LISTED, 0)


def index(call: Call):
    views, more = _listing(call)
    models = sum(1 for r in call.hub.store.list() if not r.private and r.type != KERNEL_REPO_TYPE)
    return pages.render("index.html", repos=views, more=more, models=models)


def namespace_page(call: Call):
    ns = call.p["ns"]
    views, more = _listing(call, ns)
    org = call.hub.accounts.org(ns)
    keys = call.hub.accounts.keys(ns)
    if not views and org is None and not keys:
        return pages.not_found(HubError("NotFound", f"no kernels and no org named {ns!r} on this hub"))
    return pages.render("namespace.html", ns=ns, org=org, keys=keys, repos=views, more=more)


def wants_html(call: Call) -> bool:
    """A browser (its Accept names text/html) gets pages; API clients get the JSON errors they parse."""
    return "text/html" in call.request.headers.get("accept", "")


def repo_shortcut(call: Call):
    """`/{ns}/{name}` in a browser: the kernel repo's page when there is one (this hub has no model pages)."""
    ns, name = call.p["ns"], call.p["name"]
    if not wants_html(call) or ns == "api":
        raise HubError("NotFound", f"no GET endpoint at /{ns}/{name} on this hub")
    repo = call.hub.store.get(KERNEL_REPO_TYPE, ns, name)
    if repo is not None and not repo.private:
        return RedirectResponse(f"/kernels/{ns}/{name}", status_code=302)
    return pages.not_found(HubError("RepoNotFound", f"no public kernel repo {ns}/{name} on this hub"))


ROUTES = [
    route("GET", "", index),
    route("GET", "kernels", index),
    route("GET", "kernels/{ns}", namespace_page),
    route("GET", "{ns}/{name}", repo_shortcut),
]
