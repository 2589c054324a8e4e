"""Minimal web pages: `/` lists the public repos; `/kernels/{ns}/{name}` shows each version
(`vN` branch) with its variants (folders under `build/`) and files.

Hook for other parts: `extra_sections(repo_id, version, variants)` returns extra HTML blocks for one
version. It calls `registry.matrix.render_html(repo_id: str, version: int, variants: dict[str, dict])
-> str` (variants: variant name -> parsed metadata.json, {} when unreadable) when that module and
function exist; the matrix part renders its compatibility table there. Pages never import torch.
"""

from __future__ import annotations

import html
import importlib
import json

from starlette.responses import HTMLResponse

from .manifest import Manifest
from .routing import route
from .validate import is_version_branch
from .web import Call

_STYLE = "body{font-family:sans-serif;max-width:60em;margin:2em auto}code{background:#eee}"


def _page(title: str, body: str) -> HTMLResponse:
    return HTMLResponse(
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{_STYLE}</style></head><body>{body}</body></html>"
    )


def extra_sections(repo_id: str, version: int, variants: dict[str, dict]) -> list[str]:
    """HTML blocks other parts add under a version (today: the compatibility matrix, if present)."""
    try:
        matrix = importlib.import_module("registry.matrix")
    except ImportError:
        return []
    render = getattr(matrix, "render_html", None)
    return [render(repo_id, version, variants)] if render else []


async def index(call: Call):
    rows = [
        f"<li><a href='/kernels/{html.escape(r.repo_id)}'>{html.escape(r.repo_id)}</a></li>"
        if r.type == "kernel" else f"<li>{html.escape(r.repo_id)} (model)</li>"
        for r in call.hub.store.list() if not r.private
    ]
    return _page("kernel-hub", f"<h1>kernel-hub</h1><ul>{''.join(rows) or '<li>no repos yet</li>'}</ul>")


def variants_of(call: Call, manifest: Manifest) -> dict[str, dict]:
    """Variant name -> parsed `build/<variant>/metadata.json` ({} when absent or not JSON)."""
    names = sorted({p.split("/")[1] for p in manifest if p.startswith("build/") and p.count("/") >= 2})
    out = {}
    for v in names:
        entry = manifest.get(f"build/{v}/metadata.json")
        meta: dict = {}
        if entry is not None and entry.size < 1024 * 1024:
            try:
                with call.hub.blobs.open(entry.sha256) as f:
                    meta = json.loads(f.read())
            except (OSError, ValueError):
                meta = {}
        out[v] = meta if isinstance(meta, dict) else {}
    return out


async def kernel_page(call: Call):
    repo = call.repo()
    store = call.hub.store
    versions = sorted(
        ((int(r.name[1:]), r.commit_id) for r in store.refs(repo) if r.kind == "branch" and is_version_branch(r.name)),
        reverse=True,
    )
    parts = [f"<h1>{html.escape(repo.repo_id)}</h1>"]
    if not versions:
        parts.append("<p>No versions published yet (branches v1, v2, ...).</p>")
    for number, commit_id in versions:
        manifest = store.manifest(repo, commit_id)
        variants = variants_of(call, manifest)
        parts.append(f"<h2>v{number} <small><code>{commit_id[:12]}</code></small></h2>")
        parts.append("<h3>Variants</h3><ul>" + "".join(
            f"<li><code>{html.escape(v)}</code> {html.escape(str(m.get('backend', '')))}</li>" for v, m in variants.items()
        ) + "</ul>")
        parts.extend(extra_sections(repo.repo_id, number, variants))
        parts.append("<details><summary>Files</summary><ul>" + "".join(
            f"<li><code>{html.escape(p)}</code> ({e.size} bytes)</li>" for p, e in sorted(manifest.items())
        ) + "</ul></details>")
    return _page(repo.repo_id, "".join(parts))


ROUTES = [
    route("GET", "", index),
    route("GET", "kernels/{ns}/{name}", kernel_page, T="kernels"),
]
