"""One log line per HTTP request: UTC time, client, method, path, status, bytes sent, milliseconds, request id.

An ASGI middleware around the hub's app (`create_app` wraps it), logging at INFO on `registry.hub.access`,
so `kernel-hub serve --log-level info` (the default) shows every request and `warning` none. The line is
written when the answer is complete (or the client went away: status `-`), never before. An answer with fewer
body bytes than its Content-Length (the client left mid-download: starlette stops a file answer quietly and
uvicorn drops what is sent after) gets a `client disconnected` line first.
"""

from __future__ import annotations

import logging
import time

log = logging.getLogger("registry.hub.access")


def _size(n: int) -> str:
    return f"{n} B" if n < 10_000 else f"{n / 1000:.0f} KB" if n < 10_000_000 else f"{n / 1e6:.0f} MB"


class AccessLog:
    """Wraps an ASGI app; HTTP requests are logged, other scopes (lifespan) pass through untouched."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not log.isEnabledFor(logging.INFO):
            return await self.app(scope, receive, send)
        started = time.perf_counter()
        seen = {"status": "-", "bytes": 0, "id": "-", "length": None}

        async def logged_send(message):
            if message["type"] == "http.response.start":
                seen["status"] = message["status"]
                for name, value in message.get("headers", ()):
                    if name.lower() == b"x-request-id":
                        seen["id"] = value.decode("latin-1")
                    elif name.lower() == b"content-length" and value.isdigit():
                        seen["length"] = int(value)
            elif message["type"] == "http.response.body":
                seen["bytes"] += len(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, receive, logged_send)
        finally:
            client = scope.get("client")
            query = scope.get("query_string") or b""
            path = (scope.get("raw_path") or scope["path"].encode()).decode("latin-1")
            length = seen["length"]
            if scope["method"] != "HEAD" and length is not None and seen["bytes"] < length:
                log.info(
                    "client disconnected %s on %s %s (answer cut after %d of %d bytes)",
                    seen["id"], scope["method"], path, seen["bytes"], length,
                )  # fmt: skip
            log.info(
                "%s %s %s %s%s %s %s %.1f ms %s",
                time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                client[0] if client else "-",
                scope["method"],
                path,
                "?" + query.decode("latin-1") if query else "",
                seen["status"],
                _size(seen["bytes"]),
                (time.perf_counter() - started) * 1000,
                seen["id"],
            )
