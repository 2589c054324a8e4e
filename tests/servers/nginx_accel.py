"""nginx in front of hub workers that answer downloads with X-Accel-Redirect (docs/SERVING.md, the
recommended production setup): API calls and uploads go to the hub, nginx streams the blob files."""

from __future__ import annotations

from pathlib import Path

from .nginx import PROXY

ACCEL_PREFIX = "/_blobs"

# nginx keeps only a few upstream headers on an internal redirect; the hub's own come back from $upstream_http_*.
HUB_HEADERS = ("ETag", "X-Repo-Commit", "X-Linked-Etag", "X-Linked-Size", "X-Request-Id")


def accel_conf(upstreams: list[str], blobs_dir: Path, port: int) -> str:
    """The `http {}` body: 127.0.0.1:`port` proxies to `upstreams` (host:port of `serve --accel-redirect
    /_blobs`) and serves `<blobs_dir>/sha256/` from the internal location the hub redirects to."""
    servers = "".join(f"    server {u};\n" for u in upstreams)
    adds = "".join(
        f"      add_header {h} $upstream_http_{h.lower().replace('-', '_')} always;\n" for h in HUB_HEADERS
    )
    return (
        f"  upstream hub {{\n{servers}    keepalive 64;\n  }}\n"
        f"  server {{\n    listen 127.0.0.1:{port};\n    client_max_body_size 0;\n"
        f"    location / {{{PROXY}    }}\n"
        f"    location {ACCEL_PREFIX}/ {{\n      internal;\n      alias {Path(blobs_dir).resolve()}/sha256/;\n"
        f"      sendfile on;\n      tcp_nopush on;\n      etag off;\n{adds}    }}\n  }}\n"
    )
