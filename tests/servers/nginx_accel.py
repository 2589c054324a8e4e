"""nginx in front of hub workers that answer downloads with X-Accel-Redirect (docs/SERVING.md, the
recommended production setup): API calls and uploads go to the hub, nginx streams the blob bytes — from the
blob files (`accel_conf`, the embedded store) or from the object store (`accel_s3_conf`, a fleet on S3)."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from .nginx import PROXY

ACCEL_PREFIX = "/_blobs"

# nginx keeps only a few upstream headers on an internal redirect (Cache-Control is one of them); the hub's own
# come back from $upstream_http_*.
HUB_HEADERS = ("ETag", "X-Repo-Commit", "X-Linked-Etag", "X-Linked-Size", "X-Request-Id")


def _var(header: str) -> str:
    return header.lower().replace("-", "_")


def _upstream(upstreams: list[str]) -> str:
    servers = "".join(f"    server {u};\n" for u in upstreams)
    return f"  upstream hub {{\n{servers}    keepalive 64;\n  }}\n"


def accel_conf(upstreams: list[str], blobs_dir: Path, port: int) -> str:
    """The `http {}` body: 127.0.0.1:`port` proxies to `upstreams` (host:port of `serve --accel-redirect
    /_blobs`) and serves `<blobs_dir>/sha256/` from the internal location the hub redirects to."""
    adds = "".join(f"      add_header {h} $upstream_http_{_var(h)} always;\n" for h in HUB_HEADERS)
    return (
        f"{_upstream(upstreams)}"
        f"  server {{\n    listen 127.0.0.1:{port};\n    client_max_body_size 0;\n"
        f"    location / {{{PROXY}    }}\n"
        f"    location {ACCEL_PREFIX}/ {{\n      internal;\n      alias {Path(blobs_dir).resolve()}/sha256/;\n"
        f"      sendfile on;\n      tcp_nopush on;\n      etag off;\n{adds}    }}\n  }}\n"
    )


def accel_s3_conf(upstreams: list[str], endpoint: str, port: int) -> str:
    """The `http {}` body for replicas on S3 (`serve --blobs s3://… --accel-redirect /_blobs`): 127.0.0.1:`port`
    proxies to `upstreams`; the internal location fetches the presigned object path the hub names from the
    object store at `endpoint` (an http:// URL), with the hub's Range and If-Match only; a refusal of the store
    (missing or other object: 404/412; unreachable: 502) goes back to a replica, which checks and answers."""
    return _accel_s3_upstreams(upstreams, endpoint) + _accel_s3_server(endpoint, f"127.0.0.1:{port}")


def _accel_s3_upstreams(upstreams: list[str], endpoint: str) -> str:
    host = urlsplit(endpoint).netloc
    return f"{_upstream(upstreams)}  upstream blobstore {{\n    server {host} max_fails=0;\n    keepalive 64;\n  }}\n"


def _accel_s3_server(endpoint: str, listen: str, more_locations: str = "") -> str:
    host = urlsplit(endpoint).netloc
    keep = "".join(f"      set $hub_{_var(h)} $upstream_http_{_var(h)};\n" for h in HUB_HEADERS)
    adds = "".join(f"      add_header {h} $hub_{_var(h)} always;\n" for h in HUB_HEADERS)
    check = PROXY.replace("proxy_pass http://hub;", "proxy_pass http://hub$request_uri;")
    return (
        f"  server {{\n    listen {listen};\n    client_max_body_size 0;\n"
        f"    location / {{{PROXY}    }}\n{more_locations}"
        f"    location {ACCEL_PREFIX}/ {{\n      internal;\n{keep}"
        "      set $blob_range $upstream_http_x_blob_range;\n"
        "      set $blob_if_match $upstream_http_x_blob_if_match;\n"
        "      proxy_pass http://blobstore/;\n"
        "      proxy_http_version 1.1;\n"
        "      proxy_pass_request_headers off;\n"
        f"      proxy_set_header Host {host};\n"
        '      proxy_set_header Connection "";\n'
        "      proxy_set_header Range $blob_range;\n"
        "      proxy_set_header If-Match $blob_if_match;\n"
        "      proxy_hide_header ETag;\n      proxy_hide_header x-amz-request-id;\n"
        "      proxy_hide_header x-amz-id-2;\n      proxy_hide_header x-amz-meta-sha256;\n"
        "      proxy_hide_header Cache-Control;\n"  # the store's: the hub's, kept from its answer, is the one
        "      proxy_connect_timeout 5s;\n"
        "      proxy_max_temp_file_size 0;\n"
        "      proxy_intercept_errors on;\n"
        "      error_page 403 404 412 416 500 502 503 504 = @blob_check;\n"
        f"{adds}    }}\n"
        f"    location @blob_check {{{check}"
        "      proxy_set_header X-Kernel-Hub-Blob-Check 1;\n    }\n  }\n"
    )


# Paths of files named by a full commit id (`/kernels/ns/name/resolve/<40 hex>/…`, and the models form): what
# get_kernel, kernels and snapshot_download ask for once they know the commit (docs/HUB_PROTOCOL.md).
COMMIT_FILES = "^/(kernels/)?[^/]+/[^/]+/resolve/[0-9a-f]{40}/"


def cached_accel_s3_conf(upstreams: list[str], endpoint: str, port: int, cache_dir: Path) -> str:
    """`accel_s3_conf` with a cache in front (docs/SERVING.md "A cache in front"): commit-named file paths go
    through nginx's proxy_cache to a second, internal copy of the accel server (a unix socket in `cache_dir`),
    so a cached answer holds the bytes, not the redirect (nginx never caches an X-Accel-Redirect answer). The
    hub decides what is kept (`Cache-Control: public, max-age` only for public commit-named files); concurrent
    misses of one file make one request (proxy_cache_lock). `X-Cache` says HIT, MISS, EXPIRED or BYPASS."""
    cache_dir = Path(cache_dir).resolve()
    inner = f"unix:{cache_dir / 'inner.sock'}"
    front = (
        f'    location ~ "{COMMIT_FILES}" {{\n'
        "      proxy_pass http://cache_fill;\n"
        "      proxy_http_version 1.1;\n"
        '      proxy_set_header Connection "";\n'
        "      proxy_set_header Host $http_host;\n"
        "      proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;\n"
        "      proxy_cache files;\n"
        "      proxy_cache_lock on;\n"
        "      proxy_cache_lock_timeout 30s;\n"
        "      proxy_read_timeout 300s;\n"
        "      add_header X-Cache $upstream_cache_status always;\n"
        "    }\n"
    )
    return (
        f"  proxy_cache_path {cache_dir / 'files'} levels=1:2 keys_zone=files:16m max_size=8g inactive=10m "
        "use_temp_path=off;\n"
        f"  upstream cache_fill {{\n    server {inner};\n    keepalive 64;\n  }}\n"
        f"{_accel_s3_upstreams(upstreams, endpoint)}"
        f"{_accel_s3_server(endpoint, f'127.0.0.1:{port}', front)}"
        f"{_accel_s3_server(endpoint, inner)}"
    )
