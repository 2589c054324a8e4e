"""The pages a person browses (issue 43): a home page with each kernel's newest version, date, signer and
trust; namespace pages; HTML 404s for browsers and JSON for API clients (by Accept); file lists that link
the files; a copy-paste usage snippet; every page under 50 KB. Against the session's real hub process."""

from __future__ import annotations

import uuid

import pytest
from huggingface_hub import CommitOperationAdd, HfApi

BROWSER = {"accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}
MAX_PAGE = 50_000
KEY_ID = "0123456789abcdef"


@pytest.fixture(scope="module")
def kernel(hub):
    ns = f"ov{uuid.uuid4().hex[:8]}"
    token = hub.token(f"{ns}-u", write=[ns])
    hub.org(ns, trusted=True, members=(f"{ns}-u",))
    api = HfApi(endpoint=hub.url, token=token)
    repo = f"{ns}/fused-mlp"
    api.create_repo(repo, repo_type="kernel")
    api.create_branch(repo, branch="v1", repo_type="kernel")
    files = {
        "build/torch-cpu/metadata.json": b'{"backend": {"type": "cpu"}}',
        "build/torch-cpu/metadata.json.sig": f"{KEY_ID}\nc2lnbmF0dXJl\n".encode(),
        "build/torch-cpu/fused_mlp/__init__.py": b"# the package\n",
    }
    ops = [CommitOperationAdd(path_in_repo=p, path_or_fileobj=d) for p, d in files.items()]
    commit = api.create_commit(repo, ops, commit_message="Publish v1", repo_type="kernel", revision="v1").oid
    api.create_repo(f"{ns}/empty", repo_type="kernel")
    return {"ns": ns, "repo": repo, "commit": commit, "files": files}


def _page(http, path: str, status: int = 200) -> str:
    r = http.get(path, headers=BROWSER)
    assert r.status_code == status, (path, r.status_code, r.text[:300])
    assert r.headers["content-type"].startswith("text/html")
    assert len(r.content) < MAX_PAGE, (path, len(r.content))
    return r.text


def test_home_lists_each_kernel_with_its_latest_version_signer_and_trust(http, kernel):
    for path in ("/", "/kernels"):
        html = _page(http, path)
        row = next(line for line in html.split("<tr>") if f'href="/kernels/{kernel["repo"]}"' in line)
        assert f'href="/kernels/{kernel["repo"]}/tree/v1">v1</a>' in row and " UTC</td>" in row
        assert f"<code>{KEY_ID}</code>" in row and "<td>trusted</td>" in row
        empty = next(line for line in html.split("<tr>") if f'href="/kernels/{kernel["ns"]}/empty"' in line)
        assert "no version yet" in empty


def test_namespace_pages_and_html_404s_for_browsers(http, kernel):
    html = _page(http, f"/kernels/{kernel['ns']}")
    assert "a trusted kernel publisher" in html and f'href="/kernels/{kernel["repo"]}"' in html
    assert "Not found" in _page(http, "/kernels/nobody-at-all", 404)
    assert "Not found" in _page(http, "/no/such/page/here", 404)
    api = http.get("/no/such/page/here")  # an API client: the JSON error it parses
    assert api.status_code == 404 and api.headers["x-error-code"] == "NotFound" and "error" in api.json()

    r = http.get(f"/{kernel['repo']}", headers=BROWSER, follow_redirects=False)  # a Hub-style URL
    assert r.status_code == 302 and r.headers["location"] == f"/kernels/{kernel['repo']}"
    assert "Not found" in _page(http, "/nobody/nothing", 404)
    assert http.get(f"/{kernel['repo']}").headers["x-error-code"] == "NotFound"


def test_kernel_page_has_a_usage_snippet_and_version_pages_link_their_files(http, hub, kernel):
    html = _page(http, f"/kernels/{kernel['repo']}")
    assert f"export HF_ENDPOINT={hub.url}" in html
    assert f"get_kernel(&#34;{kernel['repo']}&#34;, version=1)" in html or (
        f'get_kernel("{kernel["repo"]}", version=1)' in html
    )
    html = _page(http, f"/kernels/{kernel['repo']}/tree/v1")
    for path, data in kernel["files"].items():
        href = f"/kernels/{kernel['repo']}/resolve/{kernel['commit']}/{path}"
        assert f'href="{href}"' in html
        assert http.get(href).content == data
    html = _page(http, f"/kernels/{kernel['repo']}/commit/{kernel['commit']}")  # the signer on every page
    assert f"key <code>{KEY_ID}</code> (not a key of this namespace)" in html
    assert (
        f'href="/kernels/{kernel["repo"]}/resolve/{kernel["commit"]}/build/torch-cpu/metadata.json"' in html
    )


def test_a_version_with_many_files_lists_the_first_ones_and_links_the_rest(http, hub):
    """A full build ships hundreds of files (cubins per arch): the page lists 150 and stays under 50 KB."""
    ns = f"ovmany{uuid.uuid4().hex[:6]}"
    api = HfApi(endpoint=hub.url, token=hub.token(ns))
    repo = f"{ns}/fused-mlp"
    api.create_repo(repo, repo_type="kernel")
    api.create_branch(repo, branch="v1", repo_type="kernel")
    ops = [
        CommitOperationAdd(path_in_repo=f"build/torch-cuda/fused_mlp/triton/aot/sm_90a/kernel_{i:03d}.cubin",
                           path_or_fileobj=f"{ns} {i}".encode())
        for i in range(400)
    ]  # fmt: skip
    commit = api.create_commit(repo, ops, commit_message="Publish v1", repo_type="kernel", revision="v1").oid
    for path in (f"/kernels/{repo}/tree/v1", f"/kernels/{repo}/commit/{commit}"):
        html = _page(http, path)
        assert "Files (400)" in html and "and 250 more" in html and html.count(".cubin</code></a>") == 150
    assert http.get(f"/api/kernels/{repo}/tree/{commit}?recursive=1").status_code == 200  # the page's link
    files = [e for e in api.list_repo_tree(repo, revision=commit, recursive=True, repo_type="kernel")
             if e.path.endswith(".cubin")]  # fmt: skip
    assert len(files) == 400  # the stock client follows the API's pages
