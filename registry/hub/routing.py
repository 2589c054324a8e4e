"""Routing on the raw request path, split first and percent-decoded per segment.

The clients quote revisions and tree paths with `safe=""`, so `refs%2Fheads%2Fv1` is ONE segment
(docs/HUB_PROTOCOL.md §1); Starlette's decoded `path` would turn it into three. Patterns are lists of
segments: a literal, `{name}` (one segment) or `{name:path}` (the rest, joined by '/', maybe empty).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from urllib.parse import unquote


@dataclass(frozen=True)
class Route:
    methods: frozenset[str]
    pattern: tuple[str, ...]
    handler: Callable[..., Awaitable]
    fixed: tuple[tuple[str, str], ...] = ()  # params the pattern implies, e.g. T=models for /{ns}/{name}/...


def route(methods: str, pattern: str, handler: Callable[..., Awaitable], **fixed: str) -> Route:
    """`route("GET HEAD", "api/{T}/{ns}/{name}/refs", handler)`; `fixed` adds implied params."""
    segs = tuple(pattern.split("/")) if pattern else ()
    return Route(frozenset(methods.split()), segs, handler, tuple(fixed.items()))


def split_raw_path(raw_path: bytes) -> list[str]:
    text = raw_path.decode("latin-1").lstrip("/")
    return [unquote(seg, errors="strict") for seg in text.split("/")] if text else []


def match(pattern: tuple[str, ...], segs: list[str]) -> dict[str, str] | None:
    params: dict[str, str] = {}
    for i, part in enumerate(pattern):
        if part.endswith(":path}"):
            params[part[1:-6]] = "/".join(segs[i:])
            return params
        if i >= len(segs):
            return None
        if part.startswith("{"):
            if not segs[i]:
                return None
            params[part[1:-1]] = segs[i]
        elif part != segs[i]:
            return None
    return params if len(segs) == len(pattern) else None


def find(routes: list[Route], method: str, segs: list[str]) -> tuple[Route | None, dict[str, str], bool]:
    """(route, params, path_matched): the first route matching path and method."""
    path_matched = False
    for r in routes:
        params = match(r.pattern, segs)
        if params is None:
            continue
        path_matched = True
        if method in r.methods:
            return r, {**dict(r.fixed), **params}, True
    return None, {}, path_matched
