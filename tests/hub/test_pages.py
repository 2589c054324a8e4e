"""The hub's web pages against a real hub process: HTML 404s for unknown repos, versions and commits; the
commit URL the stock client gets back after a commit resolves; a README is rendered Markdown (raw HTML
in it stays text); the kernel page shows the newest version in full and links the others."""

from __future__ import annotations

import html
import uuid

import pytest
from huggingface_hub import HfApi

README = """---
license: apache-2.0
tags: [kernel]
---
# Fused MLP

Call `get_kernel("org/fused-mlp", version=1)`.

| op | dtype |
|---|---|
| linear | bf16 |

<script>alert("x")</script> [docs](https://example.invalid/docs)
"""


@pytest.fixture(scope="module")
def kernel(hub):
    """A kernel repo with v1 and v2 (each one variant), a README on v2, and its owner's API."""
    user = f"pg{uuid.uuid4().hex[:8]}"
    api = HfApi(endpoint=hub.url, token=hub.token(user))
    repo = f"{user}/fused-mlp"
    api.create_repo(repo, repo_type="kernel")
    commits = {}
    for n, meta in (
        (1, b'{"backend": {"type": "cpu"}}'),
        (2, b'{"backend": {"type": "cuda", "archs": ["9.0a"]}}'),
    ):
        api.create_branch(repo, branch=f"v{n}", repo_type="kernel")
        info = api.upload_file(
            path_or_fileobj=meta, path_in_repo=f"build/torch-v{n}/metadata.json", repo_id=repo,
            repo_type="kernel", revision=f"v{n}", commit_message=f"Publish v{n}",
        )  # fmt: skip
        commits[n] = info
    commits[2] = api.upload_file(
        path_or_fileobj=README.encode(),
        path_in_repo="README.md",
        repo_id=repo,
        repo_type="kernel",
        revision="v2",
    )
    return {"repo": repo, "api": api, "commits": commits, "user": user}


def _html(http, path: str, status: int):
    r = http.get(path)
    assert r.status_code == status, (path, r.status_code, r.text[:300])
    assert r.headers["content-type"].startswith("text/html")
    return r


@pytest.mark.parametrize(
    ("path", "code", "says"),
    [
        (
            "/kernels/nobody-here/nothing",
            "RepoNotFound",
            "Repository Not Found for kernel repo nobody-here/nothing",
        ),
        ("/kernels/{repo}/tree/v9", "RevisionNotFound", "has no version 'v9'"),
        ("/kernels/{repo}/tree/main", "RevisionNotFound", "has no version 'main'"),
        ("/kernels/{repo}/commit/" + "0" * 40, "RevisionNotFound", "does not exist in"),
    ],
)
def test_unknown_repos_versions_and_commits_are_html_404s(http, kernel, path, code, says):
    r = _html(http, path.format(repo=kernel["repo"]), 404)
    assert r.headers["X-Error-Code"] == code
    assert "<h1>Not found</h1>" in r.text and says in html.unescape(r.text)


def test_a_private_repo_is_a_404_page_without_a_token(http, kernel):
    secret = f"{kernel['user']}/secret"
    kernel["api"].create_repo(secret, repo_type="kernel", private=True)
    assert _html(http, f"/kernels/{secret}", 404).headers["X-Error-Code"] == "RepoNotFound"
    assert secret not in _html(http, "/", 200).text


def test_commit_urls_from_the_stock_client_resolve(http, kernel):
    info = kernel["commits"][1]
    assert info.commit_url.startswith(http.base_url.__str__().rstrip("/") + "/kernels/")
    r = _html(http, info.commit_url, 200)
    assert "Publish v1" in r.text and info.oid in r.text and "build/torch-v1/metadata.json" in r.text
    assert f"/kernels/{kernel['repo']}/tree/v1" in r.text  # the version it is


def test_readme_is_rendered_markdown_and_raw_html_stays_text(http, kernel):
    text = _html(http, f"/kernels/{kernel['repo']}", 200).text
    assert (
        "<h1>Fused MLP</h1>" in text
        and "<code>get_kernel(&quot;org/fused-mlp&quot;, version=1)</code>" in text
    )
    assert "<table>" in text and "<td>linear</td>" in text
    assert '<a href="https://example.invalid/docs">docs</a>' in text
    assert "<script>" not in text and "&lt;script&gt;" in text
    assert "license: apache-2.0" not in text  # front matter is metadata


def test_kernel_page_shows_the_newest_version_and_links_the_others(http, kernel):
    repo, commits = kernel["repo"], kernel["commits"]
    text = _html(http, f"/kernels/{repo}", 200).text
    assert 'id="v2"' in text and 'id="v1"' not in text and "cuda (9.0a)" in text
    assert (
        f'href="/kernels/{repo}/tree/v1"' in text
        and f'href="/kernels/{repo}/commit/{commits[1].oid}"' in text
    )
    v1 = _html(http, f"/kernels/{repo}/tree/v1", 200).text
    assert 'id="v1"' in v1 and "<code>torch-v1</code> cpu" in v1 and "build/torch-v1/metadata.json" in v1
