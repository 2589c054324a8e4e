"""Trust like `kernels` (docs/CONTRACTS.md "Trust"): an org without trustedKernelPublisher is refused unless
trust_remote_code says otherwise, and signatures must come from the key pinned for the namespace on first
use (or one the user gives); a changed key is refused. All against the session's real hub process.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hubs import add_key_on_purpose
from loader_paths import NAMESPACE

from registry import KernelLoadError, get_kernel
from registry.publisher.publish import publish
from registry.spec.signing import key_id, load_private_key, public_key_b64

QUIET = {"check": None, "speed_check": None, "fallback": "eager"}  # trust is decided before any of these


@pytest.fixture(scope="session")
def stranger_repo(hub, publisher) -> str:
    """`strangers/fused-mlp` v1: an org that is not a trusted kernel publisher."""
    token = hub.token("stranger", write=["strangers"])
    hub.org("strangers", trusted=False, members=("stranger",))
    dist = publisher.build("strangers", variants=["torch-cpu"])
    publish("strangers/fused-mlp", dist, 1, endpoint=hub.url, token=token, key_path=publisher.work / "s.pem")
    return "strangers/fused-mlp"


def test_an_untrusted_org_is_refused_like_kernels_does_unless_trust_remote_code(hub_env, stranger_repo):
    import kernels

    with pytest.raises(ValueError, match="is not from a trusted publisher"):  # the stock client agrees
        kernels.get_kernel(stranger_repo, version=1)
    for fallback in ("eager", None):  # nothing of the repo runs: its fallback is its own code too
        with pytest.raises(KernelLoadError) as err:
            get_kernel(stranger_repo, version=1, **{**QUIET, "fallback": fallback})
        assert (
            f"{stranger_repo} is not from a trusted publisher: strangers has no trustedKernelPublisher on "
            f'{hub_env["HF_ENDPOINT"]}; pass trust_remote_code=True or trust_remote_code=["{stranger_repo}"]'
        ) in str(err.value)
    with pytest.raises(KernelLoadError, match="not from a trusted publisher"):
        get_kernel(stranger_repo, version=1, trust_remote_code=["other/repo"], **QUIET)

    for trust in (True, [stranger_repo]):
        info = get_kernel(stranger_repo, version=1, trust_remote_code=trust, **QUIET).__kernel_info__
        assert info["source"] == "fallback-eager" and info["trust"]["publisher"] == "trust_remote_code"


def test_a_wrong_token_says_so(hub_env, fused_mlp_v1):
    with pytest.raises(KernelLoadError) as err:
        get_kernel(fused_mlp_v1[0], version=1, token="hf_not_a_token", **QUIET)
    text = str(err.value)  # the first request (the version's branch) already gets the hub's 401
    assert (
        "401" in text and "Invalid credentials in Authorization header" in text and "check HF_TOKEN" in text
    )


def test_keys_are_pinned_on_first_use_and_a_changed_key_is_refused(hub_env, hub, publisher, tmp_path):
    repo = f"{NAMESPACE}/rotated"
    publisher.publish("rotated", publisher.build("rotated-v1", variants=["torch-cpu"]))
    first = get_kernel(repo, version=1, **QUIET).__kernel_info__["trust"]
    assert (first["publisher"], first["keys"]) == ("trustedKernelPublisher", "first use")
    pins = json.loads(Path(first["pin_file"]).read_text())
    assert pins["namespace"] == NAMESPACE and first["key_id"] in {k["id"] for k in pins["keys"]}
    assert pins["publisher"]["trusted_publisher"] is True
    assert get_kernel(repo, version=1, **QUIET).__kernel_info__["trust"]["keys"] == "pinned"

    # v2 signed by a new key, which the hub's admin registers for the same namespace (without a rotation
    # signed by the pinned key: tests/loader/test_team_signing.py has the rotation loaders follow)
    new_key = add_key_on_purpose(hub, NAMESPACE, tmp_path / "new.pem")
    publisher.publish(
        "rotated", publisher.build("rotated-v2", variants=["torch-cpu"]), version=2, key=new_key
    )
    new_pub = public_key_b64(load_private_key(new_key))
    with pytest.raises(KernelLoadError) as err:
        get_kernel(repo, version=2, **QUIET)
    text = str(err.value)
    assert f"untrusted key: signed by key {key_id(new_pub)}, but {NAMESPACE} on " in text
    assert f"is pinned to key(s) {first['key_id']}" in text and "publisher_keys=[<new key>]" in text
    assert f"delete {first['pin_file']} to pin again" in text

    given = tmp_path / "new.pub"
    given.write_text(new_pub + "\n")
    info = get_kernel(repo, version=2, publisher_keys=[str(given)], **QUIET).__kernel_info__
    assert (info["trust"]["keys"], info["trust"]["key_id"]) == ("given", key_id(new_pub))

    Path(first["pin_file"]).unlink()  # the user's way to accept a rotation: pin again from the hub
    again = get_kernel(repo, version=2, **QUIET).__kernel_info__["trust"]
    assert (again["keys"], again["key_id"]) == ("first use", key_id(new_pub))
