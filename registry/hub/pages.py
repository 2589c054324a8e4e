"""The hub's web pages, rendered from the Jinja2 templates in `templates/`:

- `/`, `/kernels`, `/kernels/{ns}`, `/{ns}/{name}`: the overview pages, in home.py;
- `/kernels/{ns}/{name}` a kernel: its README (Markdown, rendered), a usage snippet, a table of versions (`vN`
  branches) with their signers, and the newest version in full: variants and the injected sections;
- `/kernels/{ns}/{name}/tree/vN` one version in full, with its files;
- `/kernels/{ns}/{name}/commit/{oid}` one commit (the `commitUrl` the hub answers after a commit points here).

An unknown repo, version or commit is an HTML 404 page (with the API's `X-Error-Code`).

Other parts add blocks under a version by injection: `create_app(..., extensions=[section, ...])`, each a
`PageSection` (the CLI's `kernel-hub serve` adds the compatibility matrix). The hub imports none of them, so
pages never import torch, kernels or huggingface_hub. A section's HTML is kept for `SECTION_TTL_S` per
(version commit, `compat` head): building the matrix costs more than the rest of a page.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Protocol

import jinja2
from markdown_it import MarkdownIt
from markupsafe import Markup
from starlette.responses import HTMLResponse

from registry.spec.names import COMPAT_BRANCH, is_version_branch, version_of
from registry.spec.variant import metadata_path

from .errors import HubError
from .manifest import Manifest
from .routing import route
from .signer import signer_of
from .storage.blobs import BlobMissing
from .web import Call

MAX_RECORD_BYTES = 1024 * 1024
MAX_README_BYTES = 256 * 1024  # a bigger README is linked, not rendered
MAX_FILES_LISTED = 150  # per page: a page stays under 50 KB; the API's tree listing has them all
SECTION_TTL_S = 60.0
_SECTION_CACHE_SIZE = 128

_TEMPLATES = jinja2.Environment(
    loader=jinja2.PackageLoader("registry.hub", "templates"),
    autoescape=jinja2.select_autoescape(["html"]),
    trim_blocks=True,
    lstrip_blocks=True,
    undefined=jinja2.StrictUndefined,
)
# CommonMark plus tables, raw HTML off: a README cannot inject markup into the hub's pages.
_MARKDOWN = MarkdownIt("js-default")


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


def render_markdown(text: str) -> Markup:
    """HTML of a Markdown text (a YAML front matter block is dropped: it is metadata, not prose)."""
    if text.startswith("---\n"):
        end = text.find("\n---", 4)
        if end != -1:
            text = text[end + 4 :].lstrip("\n")
    return Markup(_MARKDOWN.render(text))


def render(template: str, status: int = 200, headers: dict | None = None, **context) -> HTMLResponse:
    return HTMLResponse(
        _TEMPLATES.get_template(template).render(**context), status_code=status, headers=headers
    )


def not_found(err: HubError, back_url: str = "/", back_text: str = "All repositories") -> HTMLResponse:
    """The HTML 404 for a page: the hub's message, and the API's error code for tools."""
    return render(
        "not_found.html",
        status=err.status,
        headers={"X-Error-Code": err.code},
        message=err.message,
        back_url=back_url,
        back_text=back_text,
    )


class SectionCache:
    """Injected sections' HTML per (section, repo, version, commit, compat head), kept `SECTION_TTL_S`."""

    def __init__(self, size: int = _SECTION_CACHE_SIZE, ttl_s: float = SECTION_TTL_S):
        self.size, self.ttl_s = size, ttl_s
        self._items: OrderedDict[tuple, tuple[float, str]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple, make: Callable[[], str]) -> str:
        now = time.monotonic()
        with self._lock:
            hit = self._items.get(key)
            if hit is not None and now - hit[0] < self.ttl_s:
                self._items.move_to_end(key)
                return hit[1]
        value = make()
        with self._lock:
            self._items[key] = (now, value)
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)
        return value


_SECTIONS = SectionCache()


def section_html(
    sections: tuple[PageSection, ...],
    repo_id: str,
    version: int,
    commit: str,
    manifest: Manifest,
    read: Callable[[str], bytes],
    compat: Callable[[], dict[str, bytes]],
    compat_head: str | None,
) -> list[Markup]:
    """The injected blocks for one version; a failing one becomes a note, since the page must render."""
    out = []
    for i, section in enumerate(sections):

        def make(section=section) -> str:
            try:
                return section(
                    repo=repo_id,
                    version=version,
                    commit=commit,
                    paths=list(manifest),
                    read=read,
                    compat=compat(),
                )
            except Exception as e:  # noqa: BLE001 - a page must render even when a section cannot: say why
                return str(Markup("<p>{} unavailable: {}</p>").format(_title(section), e))

        out.append(Markup(_SECTIONS.get((id(section), i, repo_id, version, commit, compat_head), make)))
    return out


def _title(section: PageSection) -> str:
    return getattr(section, "title", None) or "Section"


def _backend(meta: dict) -> str:
    backend = meta.get("backend")
    if isinstance(backend, str) and "unreadable" in backend:
        return backend
    if not isinstance(backend, dict):
        return ""
    archs = ", ".join(map(str, backend.get("archs") or []))
    return f"{backend.get('type', '')}" + (f" ({archs})" if archs else "")


def format_date(epoch: float) -> str:
    return datetime.datetime.fromtimestamp(epoch, datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")


def reader(call: Call, manifest: Manifest) -> Callable[[str], bytes]:
    """`read(path)`: the bytes of a file of this manifest (KeyError when absent)."""

    def read(path: str) -> bytes:
        try:
            with call.hub.blobs.open(manifest[path].sha256) as f:
                return f.read()
        except BlobMissing as e:  # a damaged blob (fsck): the page shows the rest, and says what is missing
            raise FileNotFoundError(
                f"{path} is unreadable on this hub ({e}); see `kernel-hub fsck`"
            ) from None

    return read


def variants_of(manifest: Manifest, read: Callable[[str], bytes]) -> dict[str, dict]:
    """Variant name -> parsed `build/<v>/metadata.json` ({} when absent or not JSON)."""
    names = sorted({p.split("/")[1] for p in manifest if p.startswith("build/") and p.count("/") >= 2})
    out = {}
    for v in names:
        try:
            meta = json.loads(read(metadata_path(v)))
        except OSError:
            meta = {"backend": "metadata.json unreadable (a damaged file)"}
        except (KeyError, ValueError):
            meta = {}
        out[v] = meta if isinstance(meta, dict) else {}
    return out


def compat_files(call: Call, repo, head: str | None) -> dict[str, bytes]:
    """The JSON files of the `compat` branch at `head` (recorded real checks), path -> bytes."""
    if head is None:
        return {}
    manifest = call.hub.store.manifest(repo, head)
    read = reader(call, manifest)
    out = {}
    for p, e in manifest.items():
        if p.endswith(".json") and e.size < MAX_RECORD_BYTES:
            with contextlib.suppress(OSError):  # an unreadable record is left out, not the page
                out[p] = read(p)
    return out


def version_heads(call: Call, repo) -> list[tuple[int, str]]:
    """(N, commit) of every `vN` branch, newest first."""
    refs = call.hub.store.refs(repo)
    return sorted(((n, r.commit_id) for r in refs if r.kind == "branch" and (n := version_of(r.name)) is not None), reverse=True)  # fmt: skip


def _version(call: Call, repo, number: int, commit_id: str, *, sections: bool) -> dict:
    """What the templates show of one version; `sections` renders the injected blocks too."""
    store = call.hub.store
    manifest = store.manifest(repo, commit_id)
    read = reader(call, manifest)
    base = f"/kernels/{repo.repo_id}"
    view = {
        "number": number,
        "commit": commit_id,
        "commit_url": f"{base}/commit/{commit_id}",
        "page_url": f"{base}/tree/v{number}",
        "date": format_date(store.get_commit(repo, commit_id).created_at),
        "variants": [(v, _backend(m)) for v, m in variants_of(manifest, read).items()],
        "signer": signer_of(manifest, read, call.hub.accounts.keys(repo.namespace)),
        "sections": [],
        "manifest": manifest,
        "read": read,
    }
    if sections and call.hub.extensions:
        compat_head = store.ref(repo, "branch", COMPAT_BRANCH)
        view["sections"] = section_html(
            call.hub.extensions,
            repo.repo_id,
            number,
            commit_id,
            manifest,
            read,
            lambda: compat_files(call, repo, compat_head),
            compat_head,
        )
    return view


def _readme(view: dict) -> Markup | None:
    entry = view["manifest"].get("README.md")
    if entry is None:
        return None
    if entry.size > MAX_README_BYTES:
        return Markup("<p>README.md is {} bytes: <a href='{}'>read it here</a>.</p>").format(
            entry.size, f"{view['page_url']}#files"
        )
    try:
        text = view["read"]("README.md").decode("utf-8", errors="replace")
    except OSError:
        return Markup("<p class='muted'>README.md is unreadable on this hub (a damaged file).</p>")
    return render_markdown(text)


def _kernel_repo(call: Call):
    """The kernel repo of the path, or an HTML 404 response."""
    try:
        return call.repo(), None
    except HubError as e:
        if e.kind != "RepoNotFound":
            raise
        return None, not_found(e)


def kernel_page(call: Call):
    repo, missing = _kernel_repo(call)
    if missing:
        return missing
    versions = [
        _version(call, repo, n, c, sections=i == 0) for i, (n, c) in enumerate(version_heads(call, repo))
    ]
    readme = _readme(versions[0]) if versions else None
    return render(
        "kernel.html", repo_id=repo.repo_id, versions=versions, readme=readme, base_url=call.base_url()
    )


def version_page(call: Call):
    repo, missing = _kernel_repo(call)
    if missing:
        return missing
    rev = call.p["rev"]
    commit_id = call.hub.store.ref(repo, "branch", rev) if is_version_branch(rev) else None
    if commit_id is None:
        err = HubError(
            "RevisionNotFound", f"{repo.repo_id} has no version {rev!r}: its versions are listed on its page"
        )
        return not_found(err, f"/kernels/{repo.repo_id}", repo.repo_id)
    view = _version(call, repo, version_of(rev), commit_id, sections=True)
    files = sorted((p, e.size) for p, e in view["manifest"].items())
    return render(
        "version.html", repo_id=repo.repo_id, v=view, files=files[:MAX_FILES_LISTED], all_files=len(files)
    )


def commit_page(call: Call):
    repo, missing = _kernel_repo(call)
    if missing:
        return missing
    store = call.hub.store
    try:
        commit = store.get_commit(repo, call.p["oid"].lower())
    except HubError as e:
        return not_found(e, f"/kernels/{repo.repo_id}", repo.repo_id)
    versions = sorted(n for n, c in version_heads(call, repo) if c == commit.id)
    manifest = store.manifest(repo, commit.id)
    files = sorted((p, e.size) for p, e in manifest.items())
    all_files, files = len(files), files[:MAX_FILES_LISTED]
    signer = signer_of(manifest, reader(call, manifest), call.hub.accounts.keys(repo.namespace))
    return render(
        "commit.html",
        repo_id=repo.repo_id,
        commit=commit,
        signer=signer,
        date=format_date(commit.created_at),
        versions=versions,
        files=files,
        all_files=all_files,
    )


ROUTES = [
    route("GET", "kernels/{ns}/{name}", kernel_page, T="kernels"),
    route("GET", "kernels/{ns}/{name}/tree/{rev}", version_page, T="kernels"),
    route("GET", "kernels/{ns}/{name}/commit/{oid}", commit_page, T="kernels"),
]
