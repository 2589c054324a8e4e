"""`kernel-hub versions` and `kernel-hub info` (issue 43: users reached for `kernels versions`): every vN
with the builds it pointed at (commit, date, signer), and a repo's summary, read from a real hub process
through the CLI; a missing repo is one line."""

from __future__ import annotations

import contextlib
import io
import json
import uuid
from pathlib import Path

import pytest
from kernel_sources import EXTRA_OP, changed_source

from registry.cli import main
from registry.publisher import build as b
from registry.publisher.publish import publish

ROOT = Path(__file__).resolve().parents[2]


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def _dist(tmp: Path, name: str, append: str) -> Path:
    src = changed_source(tmp, name, append)
    return b.build(
        src, tmp / name / "dist", ROOT / "build" / "matrix.toml", aot=False, only=["torch-cpu"]
    ).out


@pytest.fixture(scope="module")
def released(hub, tmp_path_factory):
    """v1 published, then updated; v2 with another API: (repo, {name: PublishResult})."""
    tmp = tmp_path_factory.mktemp("versions")
    ns = f"rel{uuid.uuid4().hex[:6]}"
    token = hub.token(ns)
    hub.org(f"{ns}-org", trusted=True, members=(ns,))
    repo = f"{ns}/fused-mlp"
    kw = {"endpoint": hub.url, "token": token, "key_path": tmp / "k.pem"}
    results = {
        "v1": publish(repo, _dist(tmp, "a", ""), 1, **kw),
        "v1 update": publish(repo, _dist(tmp, "b", "\n# other bytes\n"), 1, update=True, **kw),
        "v2": publish(repo, _dist(tmp, "c", EXTRA_OP), 2, **kw),
    }
    return repo, results


def test_versions_lists_each_version_with_its_history(hub, released):
    repo, r = released
    code, out, err = cli("versions", repo, "--endpoint", hub.url)
    assert code == 0, err
    lines = out.splitlines()
    kid = r["v1"].key_id
    assert lines[0] == f"v2  {r['v2'].commit}"
    assert lines[1].startswith(f"  * {r['v2'].commit[:12]}  ") and f"key {kid}  Publish v2" in lines[1]
    assert lines[2] == f"v1  {r['v1 update'].commit}"
    assert lines[3].startswith(f"  * {r['v1 update'].commit[:12]}  ") and lines[3].endswith(
        f"key {kid}  Publish v1"
    )
    assert lines[4].startswith(f"    {r['v1'].commit[:12]}  ") and len(lines) == 5  # no initial commit

    code, out, _ = cli("versions", repo, "--endpoint", hub.url, "--version", "1", "--json")
    rows = json.loads(out)
    assert [(x["version"], x["commit"], x["head"], x["signer"]) for x in rows] == [
        (1, r["v1 update"].commit, True, kid),
        (1, r["v1"].commit, False, kid),
    ]
    assert all(x["date"].endswith("Z") for x in rows)


def test_info_summarises_a_repo_and_missing_repos_are_one_line(hub, released):
    repo, r = released
    code, out, err = cli("info", repo, "--endpoint", hub.url, "--json")
    assert code == 0, err
    info = json.loads(out)
    assert [v["version"] for v in info["versions"]] == [2, 1]
    assert info["latest"] == {"version": 2, "commit": r["v2"].commit, "signer": r["v2"].key_id,
                              "variants": {"torch-cpu": "cpu"}}  # fmt: skip
    assert info["trusted_publisher"] is False and [k["id"] for k in info["keys"]] == [r["v1"].key_id]
    code, out, _ = cli("info", repo, "--endpoint", hub.url)
    assert (
        out.splitlines()[0] == f"{repo} on {hub.url}" and f"latest: v2 signed by key {r['v2'].key_id}" in out
    )

    for command in ("versions", "info"):
        code, out, err = cli(command, "nobody/nothing", "--endpoint", hub.url)
        assert code == 1 and out == "" and err.count("\n") == 1, err
        assert err == (
            f"kernel-hub {command}: nobody/nothing is not a kernel repo on {hub.url} (or it is private: pass "
            "--token / set HF_TOKEN)\n"
        )
