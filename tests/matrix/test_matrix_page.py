"""The hub's kernel page shows the compatibility matrix per version (the same `render_html`), and it
renders in headless Chromium, as do the home, namespace and not-found pages: the screenshots land in
artifacts/ (CI uploads them). No page is over 50 KB of HTML."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import urllib.request
import zlib
from pathlib import Path

import pytest
from variant_names import CUDA_VARIANT

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "artifacts"
USER = "mxpage"


def browser() -> str:
    for name in ("chromium", "google-chrome", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip(
        "no headless Chromium: run `make chromium` (apt-get install chromium) to render the matrix page"
    )


@pytest.fixture(scope="module")
def page_repo(hub, tmp_path_factory):
    """mxpage/fused-mlp with v1 (sm_80 missing) and v2 (full), and a recorded check on v2."""
    from huggingface_hub import HfApi

    from registry.client.resolve import Env
    from registry.matrix.records import CheckRecord
    from registry.matrix.store import write_record
    from registry.wire import HubClient

    stable = CUDA_VARIANT

    def arch(*names, ptx=()):
        return [{"arch": a, "sass": a not in ptx or a == "sm_120", "ptx": a in ptx} for a in names]

    versions = {
        1: {stable: {"backend": {"type": "cuda"}, "archs": arch("sm_86", "sm_89", "sm_90a", ptx=("sm_86",))}},
        2: {
            "torch-cuda": {
                "backend": {"type": "cuda"},
                "archs": arch("sm_80", "sm_89", "sm_90a"),
                "triton": ["3.6.0"],
            },
            stable: {
                "backend": {"type": "cuda"},
                "archs": arch("sm_80", "sm_89", "sm_90a", "sm_120", ptx=("sm_120",)),
            },
        },
    }
    api = HfApi(endpoint=hub.url, token=hub.token(USER))
    repo = f"{USER}/fused-mlp"
    api.create_repo(repo, repo_type="kernel")
    work = tmp_path_factory.mktemp("page")
    commits = {}
    for n, variants in versions.items():
        for name, meta in variants.items():
            (work / f"v{n}" / "build" / name).mkdir(parents=True)
            (work / f"v{n}" / "build" / name / "metadata.json").write_text(json.dumps(meta))
        api.create_branch(repo, branch=f"v{n}", repo_type="kernel")
        commits[n] = api.upload_folder(
            repo_id=repo, folder_path=work / f"v{n}", repo_type="kernel", revision=f"v{n}"
        ).oid
    env = Env("linux", "x86_64", "3.12", "2.11.0", "13.0", "sm_90", "3.6.0", True, "13.0")
    write_record(
        HubClient(hub.url, hub.token(USER)),
        repo,
        CheckRecord(
            env,
            repo,
            2,
            commits[2],
            stable,
            "hub",
            None,
            True,
            {"mlp/float16/forward": 9.7e-4},
            "passed: 60/60",
            "2026-12-02T17:00:00+00:00",
            3.1,
        ),
    )
    return repo, commits


def test_kernel_page_embeds_the_matrix_of_the_newest_version_and_version_pages_theirs(hub, page_repo):
    repo, commits = page_repo
    html = urllib.request.urlopen(f"{hub.url}/kernels/{repo}", timeout=10).read().decode()
    assert html.count('<section class="kh-matrix"') == 1 and 'id="matrix-v2"' in html
    assert f"✓ {CUDA_VARIANT} (SASS sm_90a)" in html
    assert "the variant <code>get_kernel</code> picks" in html  # the legend's markdown, rendered
    assert commits[2][:12] in html and commits[1][:12] in html and f"/kernels/{repo}/tree/v1" in html
    v1 = urllib.request.urlopen(f"{hub.url}/kernels/{repo}/tree/v1", timeout=10).read().decode()
    assert v1.count('<section class="kh-matrix"') == 1 and 'id="matrix-v1"' in v1
    assert "fallback: torch.compile — no variant for sm_80" in v1


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def png_distinct_rows(data: bytes) -> int:
    """How many different pixel rows the image has (a blank page has 1): decompress the IDAT stream."""
    pos, idat = 8, b""
    while pos < len(data):
        length = struct.unpack(">I", data[pos : pos + 4])[0]
        kind = data[pos + 4 : pos + 8]
        if kind == b"IDAT":
            idat += data[pos + 8 : pos + 8 + length]
        pos += 12 + length
    raw = zlib.decompress(idat)
    _, height = png_size(data)
    stride = len(raw) // height
    return len({raw[i * stride + 1 : (i + 1) * stride] for i in range(height)})


def screenshot(url: str, name: str, tmp_path: Path) -> bytes:
    """A 1400x1000 headless Chromium screenshot of `url`, kept as artifacts/<name> (CI uploads it)."""
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / name
    shot.unlink(missing_ok=True)
    cmd = [
        browser(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}",
        f"--screenshot={shot}",
        "--window-size=1400,1000",
        url,
    ]
    r = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and shot.exists(), r.stderr[-2000:]
    data = shot.read_bytes()
    assert png_size(data) == (1400, 1000)
    return data


def test_matrix_page_renders_in_headless_chromium(hub, page_repo, tmp_path):
    repo, _ = page_repo
    data = screenshot(f"{hub.url}/kernels/{repo}", "matrix-page.png", tmp_path)
    assert len(data) > 20_000 and png_distinct_rows(data) > 100  # text and table rows, not a blank page


def test_home_and_namespace_pages_render_in_headless_chromium(hub, page_repo, tmp_path):
    """Issue 43: the home page lists each kernel with its newest version, signer and trust."""
    data = screenshot(f"{hub.url}/", "home-page.png", tmp_path / "home")
    assert len(data) > 10_000 and png_distinct_rows(data) > 30
    data = screenshot(f"{hub.url}/kernels/{USER}", "namespace-page.png", tmp_path / "ns")
    assert len(data) > 10_000 and png_distinct_rows(data) > 30
    data = screenshot(f"{hub.url}/kernels/nobody-at-all", "not-found-page.png", tmp_path / "404")
    assert png_distinct_rows(data) > 5  # an HTML page, not a raw JSON line


def test_pages_stay_under_50_kb(hub, page_repo):
    repo, _ = page_repo
    for path in (
        "/",
        f"/kernels/{USER}",
        f"/kernels/{repo}",
        f"/kernels/{repo}/tree/v1",
        f"/kernels/{repo}/tree/v2",
    ):
        size = len(urllib.request.urlopen(f"{hub.url}{path}", timeout=10).read())
        assert size < 50_000, (path, size)
