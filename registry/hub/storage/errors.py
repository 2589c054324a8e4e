"""Storage outages as answers: a database or object store that cannot be reached is a 503 the client may retry,
with a message naming which one, never a 500 (docs/CONTRACTS.md "Blob store", Outages).
"""

from __future__ import annotations

from ..errors import HubError

RETRY_AFTER_S = "5"


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
