"""The admin commands against a running hub (same database, live): tokens, orgs and keys can be listed and
revoked, and the running server acts on it at once; a `--data` that holds no hub is refused unless --init."""

from __future__ import annotations

import base64
import contextlib
import io
import json
import urllib.request
import uuid

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from huggingface_hub import HfApi
from huggingface_hub.errors import HfHubHTTPError

from registry.cli import main


def admin(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def _status(fn) -> int | None:
    try:
        fn()
    except HfHubHTTPError as e:
        return e.response.status_code
    return None


@pytest.mark.parametrize(
    "argv",
    [
        ["token", "create", "--user", "alice"],
        ["token", "list"],
        ["token", "revoke", "0123456789ab"],
        ["org", "create", "acme"],
        ["org", "list"],
        ["org", "members", "acme"],
        ["key", "list"],
        ["key", "revoke", "acme", "0123456789abcdef"],
    ],
)
def test_a_folder_without_a_hub_is_refused(tmp_path, argv):
    mistyped = tmp_path / "hub-dta"
    code, out, err = admin(*argv, "--data", str(mistyped))
    assert code == 2 and out == ""
    assert err.strip() == f"kernel-hub {argv[0]}: --data {mistyped} holds no hub (no hub.sqlite3); " + (
        "pass --init to start a new hub there" if argv[1] == "create" else "check the path"
    )
    assert not mistyped.exists()


def test_init_starts_a_hub(tmp_path):
    data = tmp_path / "new-hub"
    code, out, err = admin("token", "create", "--user", "alice", "--data", str(data), "--init")
    assert code == 0 and out.startswith("hf_") and f"starting a new hub in {data}" in err
    code, out, _ = admin("token", "list", "--data", str(data))
    assert code == 0 and out.splitlines()[0].split() == ["ID", "USER", "ALSO", "WRITES", "CREATED"]
    assert out.splitlines()[1].split()[1:3] == ["alice", "-"]


def test_revoked_token_is_refused_by_the_running_hub(hub):
    user = f"t{uuid.uuid4().hex[:8]}"
    token = hub.token(user, write=["shared-ns"])
    api = HfApi(endpoint=hub.url, token=token)
    api.create_repo(f"{user}/one", repo_type="model")
    code, out, _ = admin("token", "list", "--data", str(hub.data_dir))
    row = next(line.split() for line in out.splitlines() if f" {user} " in f" {line} ")
    assert code == 0 and row[2] == "shared-ns"
    code, _, err = admin("token", "revoke", row[0][:8], "--data", str(hub.data_dir))
    assert code == 0 and f"token {row[0]} of {user} revoked" in err
    assert _status(lambda: api.create_repo(f"{user}/two", repo_type="model")) == 401
    code, _, err = admin("token", "revoke", row[0], "--data", str(hub.data_dir))
    assert code == 1 and err.startswith("kernel-hub token: no token(s) match")
    code, _, err = admin("token", "revoke", "xyz", "--data", str(hub.data_dir))
    assert code == 1 and "at least 8 hex digits" in err


def test_org_list_and_members_change_write_access(hub):
    org, user = f"o{uuid.uuid4().hex[:8]}", f"m{uuid.uuid4().hex[:8]}"
    api = HfApi(endpoint=hub.url, token=hub.token(user))
    assert admin("org", "create", org, "--trusted", "--data", str(hub.data_dir))[0] == 0
    code, out, _ = admin("org", "members", org, "--add", user, "--data", str(hub.data_dir))
    assert code == 0 and out.split() == [user]
    code, out, _ = admin("org", "list", "--data", str(hub.data_dir))
    assert [org, "yes", "1"] in [line.split() for line in out.splitlines()]
    api.create_repo(f"{org}/kernel-a", repo_type="model")  # a member writes the org's namespace
    code, out, _ = admin("org", "members", org, "--remove", user, "--data", str(hub.data_dir))
    assert code == 0 and out == ""
    assert _status(lambda: api.create_repo(f"{org}/kernel-b", repo_type="model")) == 403
    code, _, err = admin("org", "members", "no-such-org", "--data", str(hub.data_dir))
    assert code == 1 and "no org 'no-such-org'" in err and "kernel-hub org create" in err


def test_key_list_and_revoke(hub, tmp_path):
    ns = f"k{uuid.uuid4().hex[:8]}"
    raw = (
        Ed25519PrivateKey.generate()
        .public_key()
        .public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    )
    (tmp_path / "pub").write_text(base64.b64encode(raw).decode())
    code, key_id, _ = admin(
        "key", "add", ns, "--public-key", str(tmp_path / "pub"), "--data", str(hub.data_dir)
    )
    key_id = key_id.strip()
    assert code == 0
    code, out, _ = admin("key", "list", ns, "--data", str(hub.data_dir))
    assert [line.split()[:2] for line in out.splitlines()] == [["NAMESPACE", "KEY"], [ns, key_id]]

    def served() -> list[str]:
        with urllib.request.urlopen(f"{hub.url}/api/kernel-hub/keys/{ns}") as r:
            return [k["id"] for k in json.loads(r.read())["keys"]]

    assert served() == [key_id]
    code, _, err = admin("key", "revoke", ns, key_id, "--data", str(hub.data_dir))
    assert code == 0 and f"key {key_id} of {ns} revoked" in err
    assert served() == []
    code, _, err = admin("key", "revoke", ns, key_id, "--data", str(hub.data_dir))
    assert code == 1 and "kernel-hub key list" in err
