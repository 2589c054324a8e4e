"""Minimal web pages: `/` lists the public repos; `/kernels/{ns}/{name}` shows each version
(`vN` branch) with its variants (folders under `build/`) and files.

Other parts add blocks under each version by injection: `create_app(..., extensions=[section, ...])`,
each a `PageSection` (the CLI's `kernel-hub serve` adds the compatibility matrix). The hub itself
imports none of them, so pages never import torch, kernels or huggingface_hub.
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable
from typing import Protocol

from starlette.responses import HTMLResponse

from registry.spec.names import COMPAT_BRANCH, KERNEL_REPO_TYPE, version_of
from registry.spec.variant import metadata_path

from .manifest import Manifest
from .routing import route
from .web import Call

MAX_RECORD_BYTES = 1024 * 1024
_STYLE = "body{font-family:sans-serif;max-width:60em;margin:2em auto}code{background:#eee}"


def _page(title: str, body: str) -> HTMLResponse:
    return HTMLResponse(
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{_STYLE}</style></head><body>{body}</body></html>"
    )


class PageSection(Protocol):
    """An HTML block under one version of a kernel page; raising shows a one-line note instead."""

    def __call__(
        self,
        *,
        repo: str,
        version: int,
        commit: str,
        paths: list[str],
        read: Callable[[str], bytes],
        compat: dict[str, bytes],
    ) -> str: ...


def extra_sections(
    sections: tuple[PageSection, ...],
    repo_id: str,
    version: int,
    commit: str,
    manifest: Manifest,
    read: Callable[[str], bytes],
    compat: dict[str, bytes],
) -> list[str]:
    """The injected blocks for one version; a failing one becomes a note, since the page must render."""
    out = []
    for section in sections:
        try:
            out.append(
                section(
                    repo=repo_id,
                    version=version,
                    commit=commit,
                    paths=list(manifest),
                    read=read,
                    compat=compat,
                )
            )
        except Exception as e:  # noqa: BLE001 - a page must render even when a section cannot: say why
            out.append(f"<p>{html.escape(_title(section))} unavailable: {html.escape(str(e))}</p>")
    return out


def _title(section: PageSection) -> str:
    return getattr(section, "title", None) or "Section"


def _backend(meta: dict) -> str:
    backend = meta.get("backend")
    if not isinstance(backend, dict):
        return ""
    archs = ", ".join(map(str, backend.get("archs") or []))
    return f"{backend.get('type', '')}" + (f" ({archs})" if archs else "")


def index(call: Call):
    rows = [
        f"<li><a href='/kernels/{html.escape(r.repo_id)}'>{html.escape(r.repo_id)}</a></li>"
        if r.type == KERNEL_REPO_TYPE
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
            meta = json.loads(read(metadata_path(v)))
        except (KeyError, OSError, ValueError):
            meta = {}
        out[v] = meta if isinstance(meta, dict) else {}
    return out


def compat_files(call: Call, repo) -> dict[str, bytes]:
    """The JSON files of the `compat` branch (recorded real checks), path -> bytes."""
    head = call.hub.store.ref(repo, "branch", COMPAT_BRANCH)
    if head is None:
        return {}
    manifest = call.hub.store.manifest(repo, head)
    read = reader(call, manifest)
    return {p: read(p) for p, e in manifest.items() if p.endswith(".json") and e.size < MAX_RECORD_BYTES}


def kernel_page(call: Call):
    repo = call.repo()
    store = call.hub.store
    versions = sorted(
        (
            (n, r.commit_id)
            for r in store.refs(repo)
            if r.kind == "branch" and (n := version_of(r.name)) is not None
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
        parts.extend(
            extra_sections(call.hub.extensions, repo.repo_id, number, commit_id, manifest, read, compat)
        )
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
