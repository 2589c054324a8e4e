"""Storage outages as answers: a database or object store that cannot be reached is a 503 the client may retry,
with a message naming which one, never a 500 (docs/CONTRACTS.md "Blob store", Outages); a full disk is a 507,
which the stock clients do not retry (their back-off list is 408, 429, 500, 502-504): waiting does not free space.
"""

from __future__ import annotations

import errno

from ..errors import HubError

RETRY_AFTER_S = "5"


_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


def storage_full(exc: BaseException) -> HubError | None:
    """The 507 for an exception that means "no space left" (blob disk, or the database's), else None."""
    where = None
    if isinstance(exc, OSError) and exc.errno in _FULL_ERRNOS:
        where = f"the hub's blob storage is full ({exc.strerror})"
    elif type(exc).__module__.startswith("sqlalchemy"):
        orig = getattr(exc, "orig", None)
        text = str(orig or exc)
        if "database or disk is full" in text or getattr(orig, "sqlstate", None) == "53100":
            where = f"the hub's database is full ({text.strip().splitlines()[0][:200]})"
    if where is None:
        return None
    return HubError(
        "InsufficientStorage",
        f"{where}: nothing was stored; the hub's admin must free space (`kernel-hub gc` removes what no "
        "version uses) before this upload can succeed",
    )


def unavailable(exc: BaseException) -> HubError | None:
    """The 503 for an exception that means "storage unreachable or busy", else None."""
    mod = type(exc).__module__
    if mod.startswith("sqlalchemy"):
        from sqlalchemy.exc import InterfaceError, OperationalError

        if isinstance(exc, OperationalError | InterfaceError) or getattr(
            exc, "connection_invalidated", False
        ):
            first = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0][:300]
            return _answer(f"the hub's database is unavailable ({first}); retry in a few seconds")
    if mod.startswith(("botocore", "urllib3")):
        from botocore.exceptions import ClientError, HTTPClientError
        from botocore.exceptions import ConnectionError as BotoConnectionError

        if isinstance(exc, BotoConnectionError | HTTPClientError) or (
            isinstance(exc, ClientError)
            and exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) >= 500
        ):
            return _answer(f"the hub's object store is unavailable ({exc}); retry in a few seconds")
    return None


def _answer(message: str) -> HubError:
    return HubError("StorageUnavailable", message, headers={"Retry-After": RETRY_AFTER_S})
