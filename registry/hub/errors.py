"""One table from internal error kinds to the HTTP answer the stock clients understand.

`huggingface_hub` picks its exception class from `X-Error-Code` first (docs/HUB_PROTOCOL.md §1), so every
error carries one; the message goes into the JSON body `{"error": ...}` and `X-Error-Message`.
"""

from __future__ import annotations

from registry.errors import KernelHubError

# kind -> (HTTP status, X-Error-Code)
ERROR_TABLE: dict[str, tuple[int, str]] = {
    "BadRequest": (400, "BadRequest"),
    "InvalidName": (400, "InvalidName"),
    "InvalidPath": (400, "InvalidPath"),
    "InvalidRevision": (400, "InvalidRevision"),
    "Unauthorized": (401, "Unauthorized"),
    "Forbidden": (403, "Forbidden"),
    "KeyNotAllowed": (403, "KeyNotAllowed"),
    "RepoNotFound": (404, "RepoNotFound"),
    "RevisionNotFound": (404, "RevisionNotFound"),
    "EntryNotFound": (404, "EntryNotFound"),
    "NotFound": (404, "NotFound"),
    "MethodNotAllowed": (405, "MethodNotAllowed"),
    "RepoExists": (409, "RepoExists"),
    "RefExists": (409, "RefExists"),
    "PathConflict": (409, "PathConflict"),
    "StaleParentCommit": (412, "StaleParentCommit"),
    "RefMoved": (412, "RefMoved"),
    "PayloadTooLarge": (413, "PayloadTooLarge"),
    "RangeNotSatisfiable": (416, "RangeNotSatisfiable"),
    "RequestTimeout": (408, "RequestTimeout"),
    "UnknownLfsObject": (422, "UnknownLfsObject"),
    "LfsObjectMismatch": (422, "LfsObjectMismatch"),
    "Internal": (500, "InternalError"),
    "BlobDamaged": (410, "BlobDamaged"),  # not 5xx: the stock clients retry those, and waiting fixes nothing
    "XetNotSupported": (501, "XetNotSupported"),
    "InsufficientStorage": (507, "InsufficientStorage"),
    "StorageUnavailable": (503, "StorageUnavailable"),
}


class HubError(KernelHubError):
    """A refused request: `kind` is a key of ERROR_TABLE, `message` says what and what to do.

    `body` adds keys to the JSON body (e.g. the 409 `url`, the 412 `current`);
    `headers` adds response headers (e.g. `X-Repo-Commit` on EntryNotFound from resolve).
    """

    def __init__(self, kind: str, message: str, *, body: dict | None = None, headers: dict | None = None):
        if kind not in ERROR_TABLE:
            raise ValueError(f"unknown hub error kind {kind!r}; add it to ERROR_TABLE")
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.body = body or {}
        self.headers = headers or {}

    @property
    def status(self) -> int:
        return ERROR_TABLE[self.kind][0]

    @property
    def code(self) -> str:
        return ERROR_TABLE[self.kind][1]
