"""Validation of names at the edge: repo ids, revisions, branch/tag names, file paths.

Pure functions: each returns the normalised value or raises HubError with the offending value and
what to do instead. Nothing is stored before these pass.
"""

from __future__ import annotations

import re

from registry.spec.names import KERNEL_REPO_TYPE, VERSION_LIKE, is_commit, is_version_branch

from .errors import HubError

REPO_TYPES = {"kernels": KERNEL_REPO_TYPE, "models": "model"}  # URL prefix -> repo type
TYPE_PREFIX = {v: k for k, v in REPO_TYPES.items()}
# Namespaces that would collide with URL prefixes of the API or the web pages.
RESERVED_NAMESPACES = {"api", "kernels", "models", "datasets", "spaces", "static", "organizations"}

_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?$")
_REF = re.compile(r"^[A-Za-z0-9._/-]{1,200}$")
HEX_PREFIX = re.compile(r"^[0-9a-f]{5,40}$")
MAX_PATH_BYTES = 1024
MAX_SEGMENT_BYTES = 255


def repo_name_part(value: str, what: str) -> str:
    """A namespace or repo name: letters, digits, `.`, `_`, `-`; no `--`/`..`; 1-96 chars."""
    if not isinstance(value, str) or not _NAME.match(value) or "--" in value or ".." in value:
        raise HubError(
            "InvalidName",
            f"invalid {what} {value!r}: use 1-96 letters, digits, '.', '_' or '-', starting and ending "
            "with a letter or digit, without '--' or '..'",
        )
    if value.endswith(".git"):
        raise HubError("InvalidName", f"invalid {what} {value!r}: it must not end with '.git'")
    return value


def namespace(value: str) -> str:
    repo_name_part(value, "namespace")
    if value.lower() in RESERVED_NAMESPACES:
        raise HubError("InvalidName", f"namespace {value!r} is reserved; choose another one")
    return value


def repo_type(value: str | None) -> str:
    """The `type` of a create/delete request (None is the model default)."""
    value = value or "model"
    if not isinstance(value, str) or value not in TYPE_PREFIX:
        raise HubError("BadRequest", f"repo type {value!r} is not served here; use 'kernel' or 'model'")
    return value


def ref_name(value: str, kind: str = "branch") -> str:
    """A branch or tag name, git-style; version-like branches must be canonical `vN`.

    `kernels` reads `int(name[1:])` for branches starting with `v`, so `v01` would collide with `v1`
    and `v1_0` would mean 10 (docs/HUB_PROTOCOL.md): any branch starting with `v` and a digit must
    be a canonical version branch (`registry.spec.names`).
    """
    bad = (
        not isinstance(value, str)
        or not _REF.match(value)
        or value.startswith(("/", "-", ".", "refs/"))
        or value.endswith(("/", ".", ".lock"))
        or "//" in value
        or ".." in value
        or "/." in value
        or is_commit(value)
    )
    if bad:
        raise HubError(
            "InvalidRevision",
            f"invalid {kind} name {value!r}: use letters, digits, '.', '_', '-' and '/' (no '..', no "
            "leading/trailing '/' or '.', not 'refs/...', not a 40-hex commit id)",
        )
    if kind == "branch" and VERSION_LIKE.fullmatch(value) and not is_version_branch(value):
        raise HubError(
            "InvalidRevision",
            f"invalid version branch {value!r}: version branches must be 'v' + a number without leading "
            "zeros (v0, v1, v12); kernels reads int() of the rest, so v01 collides with v1 and v1_0 means "
            "10. Name other branches so they do not start with 'v' and a digit.",
        )
    return value


def file_path(value: str) -> str:
    """A repo-relative file path: '/'-separated, no empty/'.'/'..' segments, no '\\', NUL or control chars."""
    if not isinstance(value, str) or not value:
        raise HubError("InvalidPath", f"invalid file path {value!r}: it must be a non-empty string")
    why = None
    if value.startswith("/"):
        why = "it must be relative (no leading '/')"
    elif "\\" in value:
        why = "use '/' as the separator, not '\\'"
    elif any(ord(c) < 0x20 or c == "\x7f" for c in value):
        why = "it contains NUL or another control character"
    elif len(value.encode()) > MAX_PATH_BYTES:
        why = f"it is longer than {MAX_PATH_BYTES} bytes"
    else:
        for seg in value.split("/"):
            if seg in ("", ".", ".."):
                why = "it has an empty, '.' or '..' segment"
                break
            if len(seg.encode()) > MAX_SEGMENT_BYTES:
                why = f"a segment is longer than {MAX_SEGMENT_BYTES} bytes"
                break
            if seg == ".git":
                why = "'.git' is not allowed as a path segment"
                break
    if why:
        raise HubError("InvalidPath", f"invalid file path {value!r}: {why}")
    return value


def folder_path(value: str) -> str:
    """A folder path as given to tree/deletedFolder: like file_path, trailing '/' tolerated, '' = root."""
    value = (value or "").rstrip("/")
    return file_path(value) if value else ""


def sha256_hex(value: str) -> str:
    if not isinstance(value, str) or not re.match(r"^[0-9a-f]{64}$", value):
        raise HubError("BadRequest", f"invalid LFS oid {value!r}: expected 64 lowercase hex digits (sha256)")
    return value
