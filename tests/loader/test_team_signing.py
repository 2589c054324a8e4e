"""Team signing (issue 43): one namespace, one key its consumers pinned. A second machine's fresh key is
refused (by the publisher before any key file is made, and by the hub), the team shares its key with
`kernel-hub key export` / `import`, and a rotation signed by the pinned key is followed by loaders, while a
key nobody endorsed stays refused. All against the session's real hub process and the real CLI.
"""

from __future__ import annotations

import contextlib
import io
import json
import uuid
from pathlib import Path

import httpx2
import pytest

from registry import KernelLoadError, get_kernel
from registry.cli import main
from registry.publisher.errors import PublishError
from registry.publisher.publish import publish
from registry.spec.signing import generate_key, key_id, load_private_key, public_key_b64, save_private_key

QUIET = {"check": None, "speed_check": None, "fallback": "eager"}


def cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(args))
    return rc, out.getvalue(), err.getvalue()


@pytest.fixture
def team(hub, publisher):
    """A fresh trusted org per test: (namespace, token, a torch-cpu dist)."""
    team.n = getattr(team, "n", 0) + 1
    ns = f"team{team.n}"
    token = hub.token(f"{ns}-lead", write=[ns])
    hub.org(ns, trusted=True, members=(f"{ns}-lead",))
    return ns, token, publisher.build(f"{ns}-build", variants=["torch-cpu"])


def test_a_second_machines_fresh_key_is_refused_and_the_shared_key_works(hub, team, tmp_path, monkeypatch):
    ns, token, dist = team
    lead_key = tmp_path / "lead" / f"{ns}.pem"
    publish(f"{ns}/fused-mlp", dist, 1, endpoint=hub.url, token=token, key_path=lead_key)

    # a CI runner with no key: refused before it makes one
    ci_key = tmp_path / "ci" / f"{ns}.pem"
    with pytest.raises(PublishError) as err:
        publish(f"{ns}/fused-mlp", dist, 2, endpoint=hub.url, token=token, key_path=ci_key)
    lead_id = key_id(public_key_b64(load_private_key(lead_key)))
    assert f"{ns} signs with publisher key(s) {lead_id}" in str(err.value)
    assert f"kernel-hub key import {ns} FILE" in str(err.value) and not ci_key.exists()

    # one that has its own key already: the hub refuses to register it
    save_private_key(generate_key(), ci_key)
    with pytest.raises(PublishError, match=f"{ns} already signs with publisher key"):
        publish(f"{ns}/fused-mlp", dist, 2, endpoint=hub.url, token=token, key_path=ci_key)
    stray = public_key_b64(generate_key())
    r = httpx2.post(
        f"{hub.url}/api/kernel-hub/keys/{ns}",
        json={"public_key": stray},
        headers={"authorization": f"Bearer {token}"},
    )
    assert (r.status_code, r.headers["X-Error-Code"]) == (403, "KeyNotAllowed")
    assert "kernel-hub key rotate" in r.json()["error"]
    listed = httpx2.get(f"{hub.url}/api/kernel-hub/keys/{ns}").json()["keys"]
    assert [k["id"] for k in listed] == [lead_id]
    assert list((tmp_path / "ci").glob("*.pending-*")) == []

    # the team's way: export where the key lives, import on the runner (stdin, as from a CI secret)
    rc, pem, _ = cli("key", "export", ns, "--key", str(lead_key))
    assert rc == 0 and pem.startswith("-----BEGIN PRIVATE KEY-----")
    (tmp_path / "team.pem").write_text(pem)
    rc, _, err_text = cli("key", "import", ns, str(tmp_path / "team.pem"), "--key", str(ci_key))
    assert rc == 1 and f"already holds key {key_id(public_key_b64(load_private_key(ci_key)))}" in err_text
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(pem.encode())))
    rc, out, _ = cli("key", "import", ns, "-", "--key", str(ci_key), "--force")
    assert rc == 0 and out.strip() == f"{ns}: publisher key {lead_id} at {ci_key}"
    assert oct(ci_key.stat().st_mode & 0o777) == "0o600"
    result = publish(f"{ns}/fused-mlp", dist, 2, endpoint=hub.url, token=token, key_path=ci_key)
    assert result.key_id == lead_id


def test_loaders_follow_a_rotation_signed_by_the_key_they_pinned(hub, hub_env, team, publisher, tmp_path):
    ns, token, dist = team
    repo = f"{ns}/fused-mlp"
    key = tmp_path / f"{ns}.pem"

    def release(version: int, key_path: Path) -> None:
        dist = publisher.build(f"{ns}-v{version}", variants=["torch-cpu"])
        publish(repo, dist, version, endpoint=hub.url, token=token, key_path=key_path)

    publish(repo, dist, 1, endpoint=hub.url, token=token, key_path=key)
    first = get_kernel(repo, version=1, **QUIET).__kernel_info__["trust"]
    assert first["keys"] == "first use"
    old_id = first["key_id"]

    rc, out, err_text = cli("key", "rotate", ns, "--key", str(key), "--endpoint", hub.url, "--token", token)
    assert rc == 0, err_text
    new_id = key_id(public_key_b64(load_private_key(key)))
    assert (
        new_id != old_id
        and out.strip() == f"{ns}: key {new_id} added, endorsed by {old_id}; publish signs with {key}"
    )
    assert key_id(public_key_b64(load_private_key(key.with_name(f"{key.name}.retired-{old_id}")))) == old_id

    release(2, key)
    info = get_kernel(repo, version=2, **QUIET).__kernel_info__["trust"]
    assert (info["keys"], info["key_id"]) == ("rotation", new_id)
    pins = json.loads(Path(info["pin_file"]).read_text())["keys"]
    assert [(k["id"], k["source"]) for k in pins][1] == (new_id, f"rotation endorsed by key {old_id}")
    assert get_kernel(repo, version=2, **QUIET).__kernel_info__["trust"]["keys"] == "pinned"
    # the pages say who signed each version
    page = httpx2.get(f"{hub.url}/kernels/{repo}").text
    assert f"key <code>{new_id}</code> (rotation endorsed by {old_id})" in page
    assert f"<td><code>{old_id}</code></td>" in page
    v1 = httpx2.get(f"{hub.url}/kernels/{repo}/tree/v1").text
    assert f"key <code>{old_id}</code> (registered)" in v1

    # a key a hub admin added without an endorsement: on the hub, but a pinned loader does not follow it
    stray = tmp_path / "stray.pem"
    save_private_key(generate_key(), stray)
    (tmp_path / "stray.pub").write_text(public_key_b64(load_private_key(stray)) + "\n")
    hub._admin("key", "add", ns, "--public-key", str(tmp_path / "stray.pub"))
    release(3, stray)
    with pytest.raises(KernelLoadError, match="no rotation signed by a pinned key leads to it"):
        get_kernel(repo, version=3, **QUIET)


def test_a_forged_rotation_is_refused_by_the_hub(hub, team, tmp_path):
    ns, token, dist = team
    key = tmp_path / f"{ns}.pem"
    publish(f"{ns}/fused-mlp", dist, 1, endpoint=hub.url, token=token, key_path=key)
    new_pub = public_key_b64(generate_key())
    from registry.spec.signing import sign_endorsement

    forged = sign_endorsement(generate_key(), ns, new_pub)  # signed by a key that is not the namespace's
    r = httpx2.post(
        f"{hub.url}/api/kernel-hub/keys/{ns}",
        json={
            "public_key": new_pub,
            "endorsed_by": key_id(public_key_b64(load_private_key(key))),
            "endorsement": forged,
        },
        headers={"authorization": f"Bearer {token}"},
    )
    assert (r.status_code, r.headers["X-Error-Code"]) == (403, "KeyNotAllowed")
    assert "is not signed by key" in r.json()["error"]


def test_a_rotation_is_followed_on_a_hub_without_the_key_route(plain_hub, publisher, monkeypatch, tmp_path):
    """The Hugging Face Hub has no key route: the rotation's endorsement travels in the version itself
    (keys/<id>.endorsement), and a loader pinned to the old key follows it all the same."""
    from huggingface_hub import HfApi

    from tests.conftest import point_clients_at

    ns = f"plainteam{uuid.uuid4().hex[:6]}"
    token = plain_hub.token(f"{ns}-lead", write=[ns])
    plain_hub.org(ns, trusted=True, members=(f"{ns}-lead",))
    point_clients_at(monkeypatch, plain_hub.url, tmp_path / "clients")
    repo, key = f"{ns}/fused-mlp", tmp_path / f"{ns}.pem"
    dist = publisher.build(f"{ns}-v1", variants=["torch-cpu"])
    publish(repo, dist, 1, endpoint=plain_hub.url, token=token, key_path=key)
    first = get_kernel(repo, version=1, **QUIET).__kernel_info__["trust"]
    assert first["keys"] == "first use"

    rc, out, err = cli("key", "rotate", ns, "--key", str(key), "--endpoint", plain_hub.url, "--token", token)
    assert rc == 0 and "this hub has no key route: the next publish ships the endorsement" in out, err
    new_id = key_id(public_key_b64(load_private_key(key)))
    v2 = publish(repo, publisher.build(f"{ns}-v2", variants=["torch-cpu"]), 2, endpoint=plain_hub.url,
                 token=token, key_path=key)  # fmt: skip
    files = HfApi(endpoint=plain_hub.url).list_repo_files(repo, repo_type="kernel", revision=v2.commit)
    assert f"keys/{new_id}.endorsement" in files
    info = get_kernel(repo, version=2, **QUIET).__kernel_info__["trust"]
    assert (info["keys"], info["key_id"]) == ("rotation", new_id)
