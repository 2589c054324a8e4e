"""Publishing where our extensions are missing (`serve --no-extensions`, as the Hugging Face Hub): the
publisher key ships in the repo as keys/<key id>.pub; keyless (sigstore) bundles must sign what is published."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import json
import shutil
import uuid
from pathlib import Path

import pytest
from huggingface_hub import HfApi, hf_hub_download

from registry.cli import main
from registry.publisher import build as b
from registry.publisher import publish
from registry.spec import signing
from registry.spec.variant import METADATA, SIGSTORE, VariantMetadata
from tests.conftest import point_clients_at

ROOT = Path(__file__).resolve().parents[2]
BUNDLE = ROOT / "tests" / "loader" / "data" / "sigstore" / "a.txt.sigstore.json"
# GitHub Actions and the other CI systems sigstore detects an ambient OIDC identity in.
_CI_IDENTITY_ENV = ("ACTIONS_ID_TOKEN_REQUEST_URL", "ACTIONS_ID_TOKEN_REQUEST_TOKEN", "SIGSTORE_ID_TOKEN")


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("anywhere") / "fused-mlp"
    b.build(
        ROOT / "kernel_src" / "fused_mlp", out, ROOT / "build" / "matrix.toml", aot=False, only=["torch-cpu"]
    )
    return out


@pytest.fixture
def user(plain_hub, tmp_path):
    name = f"a{uuid.uuid4().hex[:8]}"
    return {"repo": f"{name}/fused-mlp", "token": plain_hub.token(name), "key": tmp_path / f"{name}.pem"}


def test_plain_hub_version_ships_its_key_and_stock_kernels_loads_it(
    plain_hub, user, dist, monkeypatch, tmp_path
):
    result = publish.publish(
        user["repo"], dist, 1, endpoint=plain_hub.url, token=user["token"], key_path=user["key"]
    )
    pub = signing.public_key_b64(signing.load_private_key(user["key"]))
    path = signing.key_file_path(result.key_id)
    assert path == f"keys/{signing.key_id(pub)}.pub"
    shipped = hf_hub_download(
        user["repo"],
        path,
        repo_type="kernel",
        revision="v1",
        endpoint=plain_hub.url,
        cache_dir=tmp_path / "c",
    )
    assert signing.read_key_file(path, Path(shipped).read_text()) == pub

    # A new key: the next publish of v1 ships that one instead (the old file is gone with the old tree).
    other = tmp_path / "other.pem"
    moved = publish.publish(
        user["repo"], dist, 1, endpoint=plain_hub.url, token=user["token"], key_path=other, update=True
    )
    files = HfApi(endpoint=plain_hub.url).list_repo_files(
        user["repo"], repo_type="kernel", revision=moved.commit
    )
    assert [f for f in files if f.startswith("keys/")] == [signing.key_file_path(moved.key_id)]

    point_clients_at(monkeypatch, plain_hub.url, tmp_path / "clients")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # the CPU variant's reference path
    import kernels

    mod = kernels.get_kernel(user["repo"], version=1, backend="cpu", trust_remote_code=True)
    assert mod.__name__.startswith("_fused_mlp_torch_cpu_")


def test_read_key_file_checks_the_name():
    pub = signing.public_key_b64(signing.generate_key())
    kid = signing.key_id(pub)
    assert signing.read_key_file(f"keys/{kid}.pub", signing.key_file_text(pub)) == pub
    with pytest.raises(signing.SignatureError, match="not the key its name says"):
        signing.read_key_file("keys/0123456789abcdef.pub", signing.key_file_text(pub))
    with pytest.raises(signing.SignatureError, match="base64"):
        signing.read_key_file(f"keys/{kid}.pub", "not a key\n")


def test_a_dist_bundle_must_sign_the_staged_metadata(dist, tmp_path):
    metas = publish.read_dist(dist)
    key = signing.generate_key()
    signed = tmp_path / "signed"
    shutil.copytree(dist, signed)
    vdir = signed / "build" / "torch-cpu"
    data = VariantMetadata.read(vdir).with_version(1).to_bytes()
    assert data == (vdir / METADATA).read_bytes()  # built for v1: staging as v1 changes no byte
    bundle = json.loads(BUNDLE.read_bytes())
    bundle["messageSignature"]["messageDigest"]["digest"] = base64.b64encode(
        hashlib.sha256(data).digest()
    ).decode()
    (vdir / SIGSTORE).write_text(json.dumps(bundle))
    stage = publish.stage_signed(signed, tmp_path / "stage1", metas, 1, key)
    assert f"build/torch-cpu/{SIGSTORE}" in stage
    # Published as v2, the metadata's bytes change: the bundle would sign other bytes.
    with pytest.raises(publish.PublishError, match=r"metadata.json.sigstore signs other bytes .*\(as v2\)"):
        publish.stage_signed(signed, tmp_path / "stage2", metas, 2, key)
    # A bundle over other bytes altogether (a real one, over the sigstore projects' a.txt).
    shutil.copyfile(BUNDLE, vdir / SIGSTORE)
    with pytest.raises(publish.PublishError, match="signs other bytes"):
        publish.stage_signed(signed, tmp_path / "stage3", metas, 1, key)
    (vdir / SIGSTORE).write_text("{}")
    with pytest.raises(publish.PublishError, match="not a sigstore bundle"):
        publish.stage_signed(signed, tmp_path / "stage4", metas, 1, key)


def test_sigstore_without_a_ci_identity_publishes_nothing(plain_hub, user, dist, monkeypatch):
    for k in _CI_IDENTITY_ENV:
        monkeypatch.delenv(k, raising=False)
    err = io.StringIO()
    argv = ["publish", user["repo"], str(dist), "--version", "1", "--endpoint", plain_hub.url]
    argv += ["--token", user["token"], "--key", str(user["key"]), "--sigstore"]
    with contextlib.redirect_stderr(err):
        assert main(argv) == 1
    assert err.getvalue().startswith("kernel-hub publish: --sigstore needs an ambient OIDC identity")
    assert "id-token: write" in err.getvalue() and len(err.getvalue().strip().splitlines()) == 1
    assert not HfApi(endpoint=plain_hub.url).repo_exists(user["repo"], repo_type="kernel")
    assert not user["key"].exists()


def test_publish_workflow_signs_keyless_with_its_oidc_identity():
    import yaml

    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "publish.yml").read_text())
    job = workflow["jobs"]["publish"]
    assert job["permissions"] == {"contents": "read", "id-token": "write"}
    (step,) = [s for s in job["steps"] if "kernel-hub publish" in s.get("run", "")]
    assert "--sigstore" in step["run"] and "--key" in step["run"]
    # Only this job may mint an OIDC token.
    assert workflow["permissions"] == {}
    others = [j.get("permissions", {}) for name, j in workflow["jobs"].items() if name != "publish"]
    assert all("id-token" not in p for p in others)
