"""Minimal web pages: `/` lists the public repos; `/kernels/{ns}/{name}` shows each version
(`vN` branch) with its variants (folders under `build/`) and files.

Hook for other parts: `extra_sections(repo_id, version, commit, manifest, read, compat)` returns
extra HTML blocks for one version. When `registry.matrix` exists it renders
`render_html(matrix_from_files(repo=, version=, commit=, paths=, read=, compat=)[0])`, the
compatibility matrix (`compat` = files of the repo's `compat` branch, path -> bytes). Pages never
import torch.
"""

from __future__ import annotations

import html
import importlib
import json
from collections.abc import Callable

from starlette.responses import HTMLResponse

from .manifest import Manifest
from .routing import route
from .validate import is_version_branch
from .web import Call

MAX_RECORD_BYTES = 1024 * 1024
_STYLE = "body{font-family:sans-serif;max-width:60em;margin:2em auto}code{background:#eee}"


def _page(title: str, body: str) -> HTMLResponse:
    return HTMLResponse(
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{_STYLE}</style></head><body>{body}</body></html>"
    )


def extra_sections(
    repo_id: str,
    version: int,
    commit: str,
    manifest: Manifest,
    read: Callable[[str], bytes],
    compat: dict[str, bytes],
) -> list[str]:
    """HTML blocks other parts add under a version (today: the compatibility matrix, if present)."""
    try:
        matrix = importlib.import_module("registry.matrix")
    except ImportError:
        return []
    try:
        m, warnings = matrix.matrix_from_files(
            repo=repo_id, version=version, commit=commit, paths=list(manifest), read=read, compat=compat
        )
        html_out = matrix.render_html(m)
    except Exception as e:  # noqa: BLE001 - a page must render even when the matrix cannot: say why
        return [f"<p>Compatibility matrix unavailable: {html.escape(str(e))}</p>"]
    notes = "".join(f"<li>{html.escape(w)}</li>" for w in warnings)
    return [html_out + (f"<ul>{notes}</ul>" if notes else "")]


def _backend(meta: dict) -> str:
    backend = meta.get("backend")
    if not isinstance(backend, dict):
        return ""
    archs = ", ".join(map(str, backend.get("archs") or []))
    return f"{backend.get('type', '')}" + (f" ({archs})" if archs else "")


async def index(call: Call):
    rows = [
        f"<li><a href='/kernels/{html.escape(r.repo_id)}'>{html.escape(r.repo_id)}</a></li>"
        if r.type == "kernel"
        else f"<li>{html.escape(r.repo_id)} (model)</li>"
        for r in call.hub.store.list()
        if not r.private
    ]
    return _page("kernel-hub", f"<h1>kernel-hub</h1><ul>{''.join(rows) or '<li>no repos yet</li>'}</ul>")


def reader(call: Call, manifest: Manifest) -> Callable[[str], bytes]:
    """`read(path)`: the bytes of a file of this manifest (KeyError when absent)."""

    def read(path: str) -> bytes:
        with call.hub.blobs.open(manifest[path].sha256) as f:
            return f.read()

    return read


def variants_of(manifest: Manifest, read: Callable[[str], bytes]) -> dict[str, dict]:
    """Variant name -> parsed `build/<v>/metadata.json` ({} when absent or not JSON)."""
    names = sorted({p.split("/")[1] for p in manifest if p.startswith("build/") and p.count("/") >= 2})
    out = {}
    for v in names:
        try:
            meta = json.loads(read(f"build/{v}/metadata.json"))
        except (KeyError, OSError, ValueError):
            meta = {}
        out[v] = meta if isinstance(meta, dict) else {}
    return out


def compat_files(call: Call, repo) -> dict[str, bytes]:
    """The JSON files of the `compat` branch (recorded real checks), path -> bytes."""
    head = call.hub.store.ref(repo, "branch", "compat")
    if head is None:
        return {}
    manifest = call.hub.store.manifest(repo, head)
    read = reader(call, manifest)
    return {p: read(p) for p, e in manifest.items() if p.endswith(".json") and e.size < MAX_RECORD_BYTES}


async def kernel_page(call: Call):
    repo = call.repo()
    store = call.hub.store
    versions = sorted(
        (
            (int(r.name[1:]), r.commit_id)
            for r in store.refs(repo)
            if r.kind == "branch" and is_version_branch(r.name)
        ),
        reverse=True,
    )
    compat = compat_files(call, repo)
    parts = [f"<h1>{html.escape(repo.repo_id)}</h1>"]
    if not versions:
        parts.append("<p>No versions published yet (branches v1, v2, ...).</p>")
    for number, commit_id in versions:
        manifest = store.manifest(repo, commit_id)
        read = reader(call, manifest)
        variants = variants_of(manifest, read)
        parts.append(f"<h2>v{number} <small><code>{commit_id[:12]}</code></small></h2>")
        parts.append(
            "<h3>Variants</h3><ul>"
            + "".join(
                f"<li><code>{html.escape(v)}</code> {html.escape(_backend(m))}</li>"
                for v, m in variants.items()
            )
            + "</ul>"
        )
        parts.extend(extra_sections(repo.repo_id, number, commit_id, manifest, read, compat))
        parts.append(
            "<details><summary>Files</summary><ul>"
            + "".join(
                f"<li><code>{html.escape(p)}</code> ({e.size} bytes)</li>"
                for p, e in sorted(manifest.items())
            )
            + "</ul></details>"
        )
    return _page(repo.repo_id, "".join(parts))


ROUTES = [
    route("GET", "", index),
    route("GET", "kernels/{ns}/{name}", kernel_page, T="kernels"),
]
