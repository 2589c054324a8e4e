"""Any failure of a `kernel-hub` command as one line: what went wrong; what to do (docs/ARCHITECTURE.md).

`registry.cli.main` calls `describe` for every exception a command lets out. Our own `KernelHubError`s
already say both halves; errors of the libraries we drive (the hub client, the network, the file
system) get the second half here. Only `--debug` shows a traceback.
"""

from __future__ import annotations

from registry.errors import KernelHubError

INTERRUPTED_EXIT = 130  # what a shell reports for Ctrl-C


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _http(e) -> str:
    """A hub's HTTP refusal (huggingface_hub.errors.HfHubHTTPError): its status, its own message, the cure."""
    status = e.response.status_code if e.response is not None else None
    said = _one_line(e.server_message or str(e).split("\n")[0])
    url = _url(e) or "the hub"
    if status == 401:
        return f"the hub refused the token (401: {said}); pass --token or set HF_TOKEN to a token of this hub"
    if status == 403:
        return f"not allowed (403: {said}); use a token that may write to this namespace"
    if status == 507:
        return f"the hub's storage is full ({status}: {said}); retrying will not help until space is freed"
    if status is not None and status >= 500:
        rid = f", request id {e.request_id}" if e.request_id else ""
        return f"the hub failed on {url} ({status}: {said}{rid}); see the hub's log, then retry"
    return f"the hub answered {status}: {said}"


def describe(e: BaseException) -> tuple[str, int]:
    """(one-line message, exit code) for an exception out of a command."""
    if isinstance(e, KernelHubError):
        return _one_line(str(e)), e.exit_code
    if isinstance(e, KeyboardInterrupt):
        return "interrupted", INTERRUPTED_EXIT
    from registry.hub.storage.errors import unavailable

    if (outage := unavailable(e)) is not None:  # --db / --blobs of a server that does not answer
        said = _one_line(outage.message).removesuffix("; retry in a few seconds")
        return (
            f"{said}; check that it runs and that --db / --blobs (or $KERNEL_HUB_DB / AWS_*) point at it",
            1,
        )
    import httpx2
    from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled

    if isinstance(e, HfHubHTTPError):
        return _http(e), 1
    if isinstance(e, OfflineModeIsEnabled):
        return f"{_one_line(str(e))}; unset HF_HUB_OFFLINE to reach the hub", 1
    if isinstance(e, httpx2.TransportError):
        url = _url(e, base=True)
        where = f" at {url}" if url else ""
        what = f"{type(e).__name__}: {_one_line(str(e)) or 'no answer'}"
        return (
            f"cannot reach the hub{where} ({what}); check that it runs and that --endpoint or HF_ENDPOINT point at it",
            1,
        )
    if isinstance(e, OSError):
        return f"{_one_line(str(e)) or type(e).__name__}; check the path and its permissions", 1
    return (
        f"unexpected {type(e).__name__}: {_one_line(str(e))}; re-run with --debug for the traceback and report it",
        1,
    )


def _url(e, base: bool = False) -> str | None:
    """The URL of the request that failed (scheme://host:port only with `base`), None when unknown."""
    for get in (lambda: e.request, lambda: e.response.request):
        try:
            url = get().url
        except (AttributeError, RuntimeError):  # httpx raises when an error carries no request
            continue
        return f"{url.scheme}://{url.netloc.decode()}" if base else str(url)
    return None
