"""nginx from Debian's package as a load balancer in front of hub replicas, or as a plain file server.

The config is written into a temp dir (`nginx.conf`, logs, temp paths there); nginx runs in the foreground
(`daemon off`) as our child, so stopping it is stopping one process we started.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

from . import ServerUnavailable, free_ports, wait_for

HOW = "install nginx: `make nginx` (apt-get install -y nginx, as root)"

# What a hub behind nginx needs: the client's Host (absolute URLs point back at the balancer), bodies of
# any size streamed both ways, connections to the replicas kept alive, and a failed replica skipped.
PROXY = """
      proxy_pass http://hub;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host $http_host;
      proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
      proxy_request_buffering off;
      proxy_buffering off;
      proxy_read_timeout 300s;
      proxy_next_upstream error timeout;
"""


def nginx_binary() -> str:
    found = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
    if not found:
        raise ServerUnavailable(f"nginx is not installed: {HOW}")
    return found


def balancer_conf(upstreams: list[str], port: int) -> str:
    """The `http {}` body of a load balancer on 127.0.0.1:`port` over `upstreams` (host:port)."""
    servers = "".join(f"    server {u} max_fails=1 fail_timeout=3s;\n" for u in upstreams)
    return (
        f"  upstream hub {{\n{servers}    keepalive 64;\n  }}\n"
        f"  server {{\n    listen 127.0.0.1:{port};\n    client_max_body_size 0;\n"
        f"    location / {{{PROXY}    }}\n  }}\n"
    )


def files_conf(root: Path, port: int) -> str:
    """The `http {}` body of a static file server of `root` on 127.0.0.1:`port` (sendfile)."""
    return f"  server {{\n    listen 127.0.0.1:{port};\n    root {root};\n    sendfile on;\n  }}\n"


class Nginx:
    """One nginx with the given `http {}` body; `port` is the one the body listens on."""

    def __init__(self, http_body: str, port: int, workers: int | str = 1):
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.dir = Path(tempfile.mkdtemp(prefix="kernel-hub-nginx-"))
        d = self.dir
        temps = "".join(
            f"  {k}_temp_path {d / k};\n" for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
        )
        (d / "nginx.conf").write_text(
            f"worker_processes {workers};\ndaemon off;\npid {d / 'nginx.pid'};\nerror_log {d / 'error.log'} warn;\n"
            f"events {{ worker_connections 4096; }}\n"
            f"http {{\n  access_log off;\n  default_type application/octet-stream;\n{temps}{http_body}}}\n"
        )
        self.proc: subprocess.Popen | None = None

    @classmethod
    def balancer(cls, upstreams: list[str], workers: int | str = 1) -> Nginx:
        port = free_ports(1)[0]
        return cls(balancer_conf(upstreams, port), port, workers)

    @classmethod
    def files(cls, root: Path, workers: int | str = 1) -> Nginx:
        port = free_ports(1)[0]
        return cls(files_conf(root, port), port, workers)

    def start(self) -> Nginx:
        argv = [
            nginx_binary(),
            "-p",
            str(self.dir),
            "-c",
            str(self.dir / "nginx.conf"),
            "-e",
            str(self.dir / "error.log"),
        ]
        with open(self.dir / "stderr.log", "ab") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        wait_for(self._answers, 20, f"nginx on {self.url}", self.log)
        return self

    def _answers(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise ServerUnavailable(f"nginx exited with {self.proc.returncode}: {self.log()}")
        try:
            urllib.request.urlopen(self.url + "/", timeout=1)
        except urllib.error.HTTPError:
            pass  # any HTTP answer (a 404 from an upstream) means nginx listens
        except OSError:
            return False
        return True

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)  # graceful: finish the requests in flight
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def destroy(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def log(self) -> str:
        parts = [
            p.read_text(errors="replace")
            for p in (self.dir / "error.log", self.dir / "stderr.log")
            if p.exists()
        ]
        return "\n".join(parts)[-3000:]
