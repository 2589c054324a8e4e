"""`kernel-hub publish` against a real hub process: atomic vN, signatures, API rule, races, stock kernels."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import threading
import urllib.request
import uuid
from pathlib import Path

import pytest
from huggingface_hub import HfApi, hf_hub_download
from kernel_sources import changed_source

from registry.publisher import build as b
from registry.publisher import publish
from registry.publisher.out_dir import MARKER
from registry.spec import digest, signing

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "kernel_src" / "fused_mlp"
MATRIX = ROOT / "build" / "matrix.toml"
VARIANTS = ["torch-cuda", "torch-cpu", "torch-universal"]


def _build(source: Path, out: Path) -> Path:
    b.build(source, out, MATRIX, aot=False, only=VARIANTS)
    return out


@pytest.fixture(scope="module")
def dists(tmp_path_factory):
    """Three dists: the kernel as is, one with the same API but other bytes, one with an added symbol."""
    tmp = tmp_path_factory.mktemp("dists")
    return {
        "base": _build(changed_source(tmp, "b", ""), tmp / "base" / "fused-mlp"),
        "same_api": _build(
            changed_source(tmp, "s", "\n# same API, other bytes\n"), tmp / "same" / "fused-mlp"
        ),
        "new_api": _build(
            changed_source(tmp, "n", "\n\ndef extra(x):\n    return x\n\n\n__all__ = [*__all__, 'extra']\n"),
            tmp / "new" / "fused-mlp",
        ),
    }


@pytest.fixture
def ctx(hub, tmp_path):
    """A fresh repo id in a user namespace, that user's write token and a publisher key file."""
    user = f"u{uuid.uuid4().hex[:8]}"
    return {
        "repo": f"{user}/fused-mlp",
        "ns": user,
        "endpoint": hub.url,
        "token": hub.token(user),
        "key_path": tmp_path / "keys" / f"{user}.pem",
    }


def _publish(ctx, dist, version, **kw):
    return publish.publish(
        ctx["repo"],
        dist,
        version,
        endpoint=ctx["endpoint"],
        token=ctx["token"],
        key_path=ctx["key_path"],
        **{
            "update": True,
            **kw,
        },  # moving vN is what most of these tests do (refused without: test_releases.py)
    )


def _branches(ctx) -> dict[str, str]:
    refs = HfApi(endpoint=ctx["endpoint"], token=ctx["token"]).list_repo_refs(ctx["repo"], repo_type="kernel")
    return {r.name: r.target_commit for r in refs.branches}


def _expected_files(dist: Path, ctx, variants=VARIANTS) -> set[str]:
    """The dist's files, each variant's signature and the publisher's public key (keys/<key id>.pub)."""
    files = {p.relative_to(dist).as_posix() for p in dist.rglob("*") if p.is_file()} - {MARKER}
    kid = signing.key_id(signing.public_key_b64(signing.load_private_key(ctx["key_path"])))
    return files | {f"build/{v}/metadata.json.sig" for v in variants} | {signing.key_file_path(kid)}


def _remote_files(ctx, commit: str) -> set[str]:
    api = HfApi(endpoint=ctx["endpoint"], token=ctx["token"])
    return set(api.list_repo_files(ctx["repo"], repo_type="kernel", revision=commit)) - {".gitattributes"}


def test_publish_creates_signed_complete_version(ctx, dists, tmp_path):
    result = _publish(ctx, dists["base"], 1)
    branches = _branches(ctx)
    assert branches["v1"] == result.commit and result.previous is None
    assert not [b for b in branches if b.startswith("publish/")], "temporary branch left behind"
    assert _remote_files(ctx, result.commit) == _expected_files(dists["base"], ctx)

    with urllib.request.urlopen(f"{ctx['endpoint']}/api/kernel-hub/keys/{ctx['ns']}") as r:
        keys = json.loads(r.read())["keys"]
    public = [k["public_key"] for k in keys]
    assert result.key_id in [k["id"] for k in keys]
    for v in VARIANTS:
        meta_path = hf_hub_download(
            ctx["repo"],
            f"build/{v}/metadata.json",
            revision="v1",
            repo_type="kernel",
            endpoint=ctx["endpoint"],
            cache_dir=tmp_path / "c",
        )
        sig_path = hf_hub_download(
            ctx["repo"],
            f"build/{v}/metadata.json.sig",
            revision="v1",
            repo_type="kernel",
            endpoint=ctx["endpoint"],
            cache_dir=tmp_path / "c",
        )
        data = Path(meta_path).read_bytes()
        assert signing.verify_metadata(data, Path(sig_path).read_text(), public) == result.key_id
        meta = json.loads(data)
        assert meta["version"] == 1
        assert digest.verify_digests(dists["base"] / "build" / v, meta) == []
    # The dist itself is left as built (publish signs a staged copy).
    assert not list(dists["base"].rglob("metadata.json.sig"))


def test_republishing_the_same_dist_changes_nothing(ctx, dists):
    first = _publish(ctx, dists["base"], 1)
    again = _publish(ctx, dists["base"], 1)
    assert again.commit == first.commit and again.unchanged


def test_same_api_moves_vn_forward_and_changed_api_needs_a_bump(ctx, dists):
    v1 = _publish(ctx, dists["base"], 1).commit
    moved = _publish(ctx, dists["same_api"], 1)
    assert moved.previous == v1 and moved.commit != v1
    with pytest.raises(publish.ApiChanged, match=r"added extra.*publish it as v2"):
        _publish(ctx, dists["new_api"], 1)
    branches = _branches(ctx)
    assert branches["v1"] == moved.commit
    assert not [b for b in branches if b.startswith("publish/")]
    v2 = _publish(ctx, dists["new_api"], 2)
    assert _branches(ctx)["v2"] == v2.commit


def _race(ctx, dist_a: Path, dist_b: Path, monkeypatch, method: str):
    """Publish two dists to v1 at once; both observe v1 before either swaps (a barrier in front of the swap)."""
    barrier = threading.Barrier(2, timeout=180)
    real = getattr(publish, method)

    def synced(*args, **kwargs):
        barrier.wait()
        return real(*args, **kwargs)

    monkeypatch.setattr(publish, method, synced)
    outcomes: dict[str, object] = {}

    def run(name, dist):
        try:
            outcomes[name] = _publish(ctx, dist, 1)
        except Exception as e:  # noqa: BLE001 - the test inspects the error
            outcomes[name] = e

    threads = [threading.Thread(target=run, args=(n, d)) for n, d in (("a", dist_a), ("b", dist_b))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    wins = {n: o for n, o in outcomes.items() if isinstance(o, publish.PublishResult)}
    losses = {n: o for n, o in outcomes.items() if not isinstance(o, publish.PublishResult)}
    assert len(wins) == 1 and len(losses) == 1, outcomes
    (winner, result), (_, error) = next(iter(wins.items())), next(iter(losses.items()))
    assert isinstance(error, publish.VersionMoved), repr(error)
    assert "another publish" in str(error) or "someone else" in str(error)
    branches = _branches(ctx)
    assert branches["v1"] == result.commit
    assert not [b for b in branches if b.startswith("publish/")]
    winning_dist = dist_a if winner == "a" else dist_b
    assert _remote_files(ctx, branches["v1"]) == _expected_files(winning_dist, ctx)
    return result


def test_concurrent_first_publishes_one_wins(ctx, dists, monkeypatch):
    _race(ctx, dists["base"], dists["same_api"], monkeypatch, "ref_update")


def test_concurrent_publishes_onto_existing_version_one_wins(ctx, dists, monkeypatch, tmp_path):
    _publish(ctx, dists["base"], 1)
    third = _build(changed_source(tmp_path, "third", "\n# third body\n"), tmp_path / "third" / "fused-mlp")
    _race(ctx, dists["same_api"], third, monkeypatch, "ref_update")


@pytest.fixture
def plain_ctx(plain_hub, tmp_path):
    """As `ctx`, on `plain_hub` (`serve --no-extensions`): the publisher must fall back to the Hub's own
    create_branch / parent_commit checks and ship its key in the repo."""
    user = f"p{uuid.uuid4().hex[:8]}"
    return {
        "repo": f"{user}/fused-mlp",
        "ns": user,
        "endpoint": plain_hub.url,
        "token": plain_hub.token(user),
        "key_path": tmp_path / "keys" / f"{user}.pem",
    }


def test_plain_hub_api_server_publish_and_move_forward(plain_ctx, dists, caplog):
    caplog.set_level(logging.INFO, logger="registry.publisher")
    first = publish.publish(
        plain_ctx["repo"],
        dists["base"],
        1,
        endpoint=plain_ctx["endpoint"],
        token=plain_ctx["token"],
        key_path=plain_ctx["key_path"],
    )
    logs = caplog.messages
    assert any("no key registry" in m for m in logs) and any("no ref-update" in m for m in logs)
    assert _branches(plain_ctx)["v1"] == first.commit
    assert _remote_files(plain_ctx, first.commit) == _expected_files(dists["base"], plain_ctx)
    second = _publish(plain_ctx, dists["same_api"], 1)
    assert second.previous == first.commit and second.commit != first.commit
    assert _remote_files(plain_ctx, second.commit) == _expected_files(dists["same_api"], plain_ctx)
    assert not [b for b in _branches(plain_ctx) if b.startswith("publish/")]


def test_plain_hub_api_server_races_are_refused(plain_ctx, dists, monkeypatch, tmp_path):
    # vN new: create_branch refuses the second one (409); vN existing: parent_commit refuses it (412).
    _race(plain_ctx, dists["base"], dists["same_api"], monkeypatch, "ref_update")
    third = _build(changed_source(tmp_path, "third", "\n# third body\n"), tmp_path / "third" / "fused-mlp")
    fourth = _build(
        changed_source(tmp_path, "fourth", "\n# fourth body\n"), tmp_path / "fourth" / "fused-mlp"
    )
    _race(plain_ctx, third, fourth, monkeypatch, "ref_update")


def test_tampered_dist_is_refused_before_upload(dists, tmp_path):
    copy = tmp_path / "fused-mlp"
    shutil.copytree(dists["base"], copy)
    with open(copy / "build" / "torch-cpu" / "fused_mlp" / "reference.py", "a") as f:
        f.write("\n# tampered\n")
    with pytest.raises(publish.PublishError, match="changed file fused_mlp/reference.py"):
        publish.read_dist(copy)


def _cli_publish_v1(ctx, dist: Path) -> subprocess.CompletedProcess:
    """`kernel-hub publish REPO DIST --version 1` as a user runs it, in a subprocess."""
    return subprocess.run(
        [sys.executable, "-m", "registry.cli", "publish", ctx["repo"], str(dist), "--version", "1",
         "--endpoint", ctx["endpoint"], "--token", ctx["token"], "--key", str(ctx["key_path"]), "--update"],
        check=False,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
    )  # fmt: skip


def test_cli_publish_then_stock_kernels_get_kernel(ctx, dists, hub_env, monkeypatch):
    proc = _cli_publish_v1(ctx, dists["base"])
    assert proc.returncode == 0, proc.stderr
    assert f"{ctx['repo']} v1 -> " in proc.stdout

    import kernels
    import torch

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # the reference path of the CPU variant
    mod = kernels.get_kernel(ctx["repo"], version=1, backend="cpu", trust_remote_code=True)
    assert mod.__name__.startswith("_fused_mlp_torch_cpu_")
    # Without `backend`, kernels picks the variant for this machine's torch (CPU here) on its own.
    assert kernels.get_kernel(ctx["repo"], version=1, trust_remote_code=True) is mod
    x = torch.randn(4, 6, dtype=torch.float64)
    w, bias = torch.randn(3, 6, dtype=torch.float64), torch.randn(3, dtype=torch.float64)
    ref = torch.nn.functional.gelu(x @ w.T + bias)
    out = mod.linear(x, w, bias, activation="gelu")
    assert torch.linalg.norm(out - ref) / torch.linalg.norm(ref) < 1e-12

    bad = _cli_publish_v1(ctx, dists["new_api"])
    assert bad.returncode == 1 and "publish it as v2" in bad.stderr


def test_api_differences_name_each_change():
    old = {"__all__": ["a", "b", "c"], "signatures": {"a": "(x)", "b": "(x)", "c": "(x)"}}
    new = {"__all__": ["a", "c", "d"], "signatures": {"a": "(x, y=1)", "c": "(x)", "d": "(x)"}}
    assert publish.api_differences(old, new) == ["removed b", "added d", "a(x) -> a(x, y=1)"]
    assert publish.api_differences(old, old) == []
    problems = publish.compatibility_problems({"torch-cpu": old, "legacy": None}, old)
    assert problems == ["legacy records no API, so compatibility cannot be shown"]


def test_dist_with_disagreeing_variant_apis_is_refused():
    a = {"__all__": ["x"], "signatures": {"x": "()"}}
    b_ = {"__all__": ["x", "y"], "signatures": {"x": "()", "y": "()"}}
    with pytest.raises(publish.PublishError, match="different APIs"):
        publish.dist_api({"torch-cpu": a, "torch-cuda": b_})
    assert publish.dist_api({"torch-cpu": a, "torch-cuda": a}) == a


def test_dropping_a_published_variant_needs_consent(ctx, dists, tmp_path):
    _publish(ctx, dists["base"], 1)
    partial = tmp_path / "fused-mlp"
    shutil.copytree(dists["same_api"], partial)
    shutil.rmtree(partial / "build" / "torch-universal")
    with pytest.raises(publish.PublishError, match=r"\['torch-universal'\].*--allow-dropping-variants"):
        _publish(ctx, partial, 1)
    result = _publish(ctx, partial, 1, allow_dropping_variants=True)
    assert "build/torch-universal/metadata.json" not in _remote_files(ctx, result.commit)


def test_upload_split_into_several_commits_moves_vn_once(ctx, tmp_path):
    """300 more files: the stock client commits in parts; vN goes straight to the last, complete one."""
    src = changed_source(tmp_path, "big", "")
    (src / "tables").mkdir()
    for i in range(300):
        (src / "tables" / f"t{i:03d}.txt").write_text(f"{i}\n")
    dist = tmp_path / "big-dist" / "fused-mlp"
    b.build(src, dist, MATRIX, aot=False, only=["torch-cpu"])
    result = _publish(ctx, dist, 1)
    api = HfApi(endpoint=ctx["endpoint"], token=ctx["token"])
    titles = [c.title for c in api.list_repo_commits(ctx["repo"], repo_type="kernel", revision=result.commit)]
    assert any("part 2" in t for t in titles), titles
    assert _remote_files(ctx, result.commit) == _expected_files(dist, ctx, ["torch-cpu"])
