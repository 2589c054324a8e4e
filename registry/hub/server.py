"""Running the hub: uvicorn (httptools parser, uvloop) with a guard on request heads, one or more
worker processes sharing one listening socket.

uvicorn bounds neither the time nor the size of a request head (a client that sends half a head
holds its connection forever, and httptools keeps accepting header bytes); `GuardedHttpToolsProtocol`
answers 408 when a head is not complete `HEAD_TIMEOUT_S` after the connection opened (or after the
previous answer), and 431 past `MAX_HEAD_BYTES`; a head it cannot parse gets a 400 in the hub's format. Request bodies have their own idle timeout in the
app (`HubConfig.body_timeout_s`), where the answer can use the hub's error format.
"""

from __future__ import annotations

import json
import os

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from registry import constants

HEAD_TIMEOUT_S = 10.0
MAX_HEAD_BYTES = 64 * 1024


def _raw_error(status: int, reason: str, code: str, message: str) -> bytes:
    """A complete HTTP/1.1 error answer in the hub's format, written before any ASGI app runs."""
    body = json.dumps({"error": message}).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
        f"x-error-code: {code}\r\nx-error-message: {message}\r\nconnection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol plus a deadline and a size limit for each request head."""

    head_timeout_s = constants.head_timeout_s(HEAD_TIMEOUT_S)
    max_head_bytes = MAX_HEAD_BYTES

    def connection_made(self, transport) -> None:  # type: ignore[override]
        self._head_timer = None
        self._head_bytes = 0
        super().connection_made(transport)
        self._arm_head()

    def _arm_head(self) -> None:
        self._disarm_head()
        self._head_seen = False  # any byte of the next head arrived
        self._head_timer = self.loop.call_later(self.head_timeout_s, self._head_timed_out)

    def _disarm_head(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def data_received(self, data: bytes) -> None:
        if self._head_timer is not None:
            self._head_seen = True
        super().data_received(data)
        if self._head_timer is not None and self._head_bytes > self.max_head_bytes:
            self._refuse_big_head()

    # httptools callbacks: count the head's bytes as the parser sees them (body bytes never count)
    def on_message_begin(self) -> None:
        self._head_bytes = 0
        super().on_message_begin()

    def on_url(self, url: bytes) -> None:
        self._head_bytes += len(url)
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head_bytes += len(name) + len(value) + 4
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._disarm_head()
        if self.transport.is_closing():
            return
        if self._head_bytes > self.max_head_bytes:
            self._refuse_big_head()
            return
        super().on_headers_complete()

    def _refuse_big_head(self) -> None:
        self._disarm_head()
        if not self.transport.is_closing():
            msg = f"request head over {self.max_head_bytes} bytes; send fewer or shorter headers"
            self.transport.write(_raw_error(431, "Request Header Fields Too Large", "HeadTooLarge", msg))
            self.transport.close()

    def on_response_complete(self) -> None:
        pipelined = bool(self.pipeline)  # a queued request is already complete: no head to wait for
        super().on_response_complete()
        if not pipelined and not self.transport.is_closing():
            self._arm_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head()
        super().connection_lost(exc)

    def send_400_response(self, msg: str) -> None:
        """A request httptools cannot parse: the hub's error format instead of uvicorn's plain text."""
        why = f"{msg} (malformed request line or headers: raw control or non-ASCII bytes, bad framing)"
        self.transport.write(_raw_error(400, "Bad Request", "BadRequest", why))
        self.transport.close()

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing():
            return
        if self._head_seen:  # a started head: say why; an idle keep-alive connection just closes
            msg = f"request head not complete within {self.head_timeout_s:g} s"
            self.transport.write(_raw_error(408, "Request Timeout", "RequestTimeout", msg))
        self.transport.close()


def run(
    app: str,
    *,
    host: str,
    port: int,
    workers: int = 1,
    head_timeout_s: float = HEAD_TIMEOUT_S,
    log_level: str = "warning",
) -> None:
    """Serve the ASGI app factory `app` ("module:function") with `workers` processes (uvicorn's
    supervisor restarts a worker that dies)."""
    # Worker processes are spawned, not forked: they read the head timeout from the environment.
    os.environ[constants.HEAD_TIMEOUT_S] = str(head_timeout_s)
    GuardedHttpToolsProtocol.head_timeout_s = head_timeout_s
    uvicorn.run(
        app,
        factory=True,
        host=host,
        port=port,
        workers=workers,
        http=GuardedHttpToolsProtocol,
        loop="uvloop",
        log_level=log_level,
        access_log=False,
        timeout_keep_alive=5,
    )
