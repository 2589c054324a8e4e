"""`kernel-hub serve`: run the hub HTTP server, with the compatibility matrix on its kernel pages."""

from __future__ import annotations

import argparse
import json
import logging
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from registry import constants
from registry.commands.admin import hub_exists, open_storage, store_args
from registry.errors import KernelHubError

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from registry.hub.storage import Storage

# The cheapest route every hub answers (huggingface_hub's telemetry probe): our readiness check.
READY_PATH = "/api/agent-harnesses"


class HubNotServing(KernelHubError):
    """A `kernel-hub serve` process exited or did not answer in time."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServeProcess:
    """`kernel-hub serve` as a child process on a free 127.0.0.1 port (the demo, tests, benchmarks).

    Its output goes to `log_path` (default: `<data>-<port>.log` beside the data folder). `data` None: the
    storage comes from `extra_args` (`--db URL --blobs …`, a fleet replica) and `log_path` is required.
    """

    def __init__(
        self,
        data: Path | None,
        *extra_args: str,
        log_path: Path | None = None,
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
    ):
        self.data_dir = Path(data) if data is not None else None
        self.extra_args = list(extra_args)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        if log_path is None and self.data_dir is None:
            raise ValueError("ServeProcess without a data folder needs a log_path")
        self.log_path = log_path or self.data_dir.parent / f"{self.data_dir.name}-{self.port}.log"
        self.cwd, self.env = cwd, env
        self.proc: subprocess.Popen | None = None

    def start(self, timeout_s: float = 60) -> ServeProcess:
        """Start it and wait until it answers; HubNotServing (naming the log) if it does not."""
        argv = [
            sys.executable,
            "-m",
            "registry.cli",
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
        ]
        argv += [*(["--data", str(self.data_dir)] if self.data_dir else []), *self.extra_args]
        with open(self.log_path, "ab") as log:  # the child keeps its own copy of the descriptor
            self.proc = subprocess.Popen(
                argv, cwd=self.cwd, env=self.env, stdout=log, stderr=subprocess.STDOUT
            )
        try:
            wait_until_serving(self.url, self.proc, timeout_s)
        except HubNotServing as e:
            self.stop()
            raise HubNotServing(f"{e}; see {self.log_path}") from None
        return self

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


def wait_until_serving(url: str, proc: subprocess.Popen, timeout_s: float = 60) -> None:
    """Return once the hub at `url` (run by `proc`) answers; HubNotServing if it exits or times out first."""
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            raise HubNotServing(f"kernel-hub serve exited with {proc.returncode}")
        try:
            urllib.request.urlopen(url + READY_PATH, timeout=1).read()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise HubNotServing(
                    f"kernel-hub serve did not answer on {url} within {timeout_s:g} s"
                ) from None
            time.sleep(0.1)


def register(subparsers) -> None:
    p = subparsers.add_parser("serve", help="run the hub HTTP server")
    p.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1; 0.0.0.0 = all)"
    )
    p.add_argument("--port", type=int, default=8080, help="TCP port to listen on (default 8080)")
    store_args(p, init=False)
    p.add_argument("--public-url", help="absolute base URL clients use (default: from the request Host)")
    p.add_argument("--page-size", type=int, default=1000, help="entries per tree/commits page")
    p.add_argument(
        "--lfs-threshold",
        type=int,
        default=None,
        metavar="BYTES",
        help="answer uploadMode=lfs for files of at least BYTES (publishers must then set "
        "HF_HUB_DISABLE_XET=1); default: every file is uploaded inline",
    )
    p.add_argument(
        "--max-commit-bytes",
        type=int,
        default=512 * 1024 * 1024,
        metavar="BYTES",
        help="largest commit request body accepted (default 512 MiB; bigger files go through LFS)",
    )
    p.add_argument(
        "--workers", type=int, default=1, help="worker processes sharing the port (production: 2-4 per core)"
    )
    p.add_argument(
        "--head-timeout",
        type=float,
        default=10.0,
        metavar="S",
        help="close a request head not complete in S s (408)",
    )
    p.add_argument(
        "--body-timeout", type=float, default=30.0, metavar="S", help="408 when a request body pauses for S s"
    )
    p.add_argument(
        "--accel-redirect",
        metavar="PREFIX",
        help="nginx internal location mapped to <data>/blobs/ (or, with --blobs s3://..., proxying to the "
        "object store): file bodies are answered with X-Accel-Redirect and streamed by nginx (docs/SERVING.md)",
    )
    p.add_argument(
        "--blob-redirect",
        action="store_true",
        help="answer file downloads with a 302 to a presigned URL of the S3 store (clients must reach it; "
        "stock huggingface_hub follows it and keeps its token to itself)",
    )
    p.add_argument(
        "--shared-cache-s",
        type=int,
        default=60,
        metavar="S",
        help="Cache-Control max-age of files named by their commit in public repos, for nginx's proxy_cache or "
        "a CDN in front (default 60; 0: no shared caching). Branch-addressed and private files are never "
        "cached (docs/SERVING.md)",
    )
    p.add_argument(
        "--matrix",
        type=Path,
        help="build/matrix.toml whose environments the kernel pages' matrix shows "
        "(default: ./build/matrix.toml, else the checkout's)",
    )
    p.add_argument(
        "--no-extensions",
        action="store_true",
        help="answer only the Hugging Face Hub API: no publisher-key routes, no ref-update "
        "(test publishing and loading as against the real Hub)",
    )
    p.add_argument(
        "--log-level",
        default="info",
        choices=("debug", "info", "warning", "error"),
        help="info (default): one line per request; warning: only problems; debug: the HTTP server's too",
    )
    p.set_defaults(func=_serve)


def startup_lines(args: argparse.Namespace, new: bool, storage: Storage) -> list[str]:
    """What `serve` says before it listens: where, what it serves from, how it logs."""
    from registry.hub.storage import db

    url = f"http://{args.host}:{args.port}"
    lines = [f"kernel-hub serve: {url}" + (f" (public URL {args.public_url})" if args.public_url else "")]
    hub = "new hub" if new else "existing hub"
    if args.db or args.blobs:  # a fleet replica (or a split setup): nothing of it is under --data
        lines.append(f"  storage: {storage.describe()} ({hub})")
    else:
        data = args.data.resolve()
        lines.append(f"  data:    {data} ({hub})")
        lines.append(f"  storage: SQLite {data / db.DB_FILE} (WAL), blobs in {data / 'blobs'}")
    if args.no_extensions:
        lines.append("  API:     Hugging Face Hub routes only (--no-extensions)")
    quiet = args.log_level in ("warning", "error")
    lines.append(
        f"  log:     {'problems only' if quiet else 'one line per request'} (--log-level {args.log_level})"
    )
    return lines


def check_port_free(host: str, port: int) -> None:
    """One line before the banner when the address is taken (uvicorn would print its banner, then Errno 98)."""
    import errno
    import socket

    if not port:
        return
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        # as uvicorn binds: a port in TIME_WAIT is no conflict
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise KernelHubError(
                    f"{host}:{port} is already in use (another `kernel-hub serve`?); stop it, or pass --port"
                ) from None
            raise KernelHubError(
                f"cannot listen on {host}:{port} ({e.strerror}); check --host and --port"
            ) from None


def sweep_interrupted_publishes(storage) -> None:
    """Delete every `publish/*` branch at start: each belongs to a publish the restart cut off (a publisher
    still running then fails with "temporary branch vanished" and moves nothing). Not for a fleet: other
    replicas serve live publishes, and `kernel-hub gc` removes theirs after an hour."""
    from registry.hub.maintenance import remove_publish_branches
    from registry.hub.storage.repos import RepoStore

    removed, _ = remove_publish_branches(RepoStore(storage.engine), max_age_s=0.0)
    if removed:
        log.warning(
            "removed %d temporary branch(es) of publishes the last stop interrupted: %s",
            len(removed),
            ", ".join(removed[:5]) + (" ..." if len(removed) > 5 else ""),
        )


def _serve(args: argparse.Namespace) -> int:
    from registry.hub.server import run

    # Open the storage once here, so a bad option, an unreachable store or an old schema is one clear line
    # before any worker starts (SQLite is also upgraded here, once, not by every worker).
    check_port_free(args.host, args.port)
    new = not hub_exists(args)
    storage = open_storage(args, create=True)
    if not (args.db or args.blobs):  # the only server of this data: no publish outlived the last one
        sweep_interrupted_publishes(storage)
    storage.engine.dispose()
    # how `serve` hands its options to every worker process (spawned, not forked)
    os.environ[constants.SERVE_ARGS] = json.dumps(
        {
            "data": str(args.data) if args.data else None,
            "db": args.db,
            "blobs": args.blobs,
            "blob_redirect": args.blob_redirect,
            "shared_cache_s": args.shared_cache_s,
            "public_url": args.public_url,
            "page_size": args.page_size,
            "lfs_threshold": args.lfs_threshold,
            "max_commit_bytes": args.max_commit_bytes,
            "accel_prefix": args.accel_redirect,
            "body_timeout_s": args.body_timeout,
            "extension_routes": not args.no_extensions,
            "matrix": str(args.matrix) if args.matrix else None,
            "log_level": logging.getLogger("registry").getEffectiveLevel(),
            "hub_log_level": args.log_level.upper(),  # registry.hub: the access log is INFO
        }
    )
    print("\n".join(startup_lines(args, new, storage)), flush=True)
    run(
        f"{__name__}:app_from_env",
        host=args.host,
        port=args.port,
        workers=args.workers,
        head_timeout_s=args.head_timeout,
        # uvicorn's own lines repeat ours (address, start-up): shown only with --log-level debug
        log_level=args.log_level if args.log_level in ("debug", "error") else "warning",
    )
    return 0


def app_from_env():
    """The app of one worker process, from the options `serve` put in the environment."""
    from registry.cli import setup_logging
    from registry.hub.app import create_app
    from registry.hub.storage import open_storage
    from registry.hub.web import HubConfig
    from registry.matrix.files import MatrixSection

    opts = json.loads(constants.serve_args())
    setup_logging()  # a spawned worker starts without the CLI's log setup
    logging.getLogger("registry").setLevel(opts["log_level"])
    logging.getLogger("registry.hub").setLevel(opts["hub_log_level"])
    config = HubConfig(
        public_url=opts["public_url"],
        page_size=opts["page_size"],
        lfs_threshold=opts["lfs_threshold"],
        max_commit_bytes=opts["max_commit_bytes"],
        accel_prefix=opts["accel_prefix"],
        body_timeout_s=opts["body_timeout_s"],
        extension_routes=opts["extension_routes"],
        blob_redirect=opts["blob_redirect"],
        shared_cache_s=opts["shared_cache_s"],
    )
    matrix = Path(opts["matrix"]) if opts["matrix"] else None
    data = Path(opts["data"]) if opts["data"] else None
    storage = open_storage(data, opts["db"], opts["blobs"])
    return create_app(config=config, extensions=[MatrixSection(matrix)], storage=storage)
