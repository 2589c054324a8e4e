"""Keyless (sigstore) checks of metadata.json against recorded real bundles (tests/loader/data/sigstore/README.md).

Everything runs offline against the recorded production trusted root.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kernels.verify import DEFAULT_POLICIES

from registry import constants
from registry.client import keyless
from registry.errors import UsageError
from registry.spec.signing import SignatureError

DATA = Path(__file__).parent / "data" / "sigstore"
BEACON = (
    "https://github.com/sigstore-conformance/extremely-dangerous-public-oidc-beacon/"
    ".github/workflows/extremely-dangerous-oidc-beacon.yml@refs/heads/main"
)
RFC8785 = "https://github.com/trailofbits/rfc8785.py/.github/workflows/release.yml@refs/tags/v0.1.2"


@pytest.fixture(scope="module")
def root():
    return keyless.trusted_root(DATA / "trusted_root.json")


def _verify(artifact: bytes, bundle: str, accepted: list[str] | None, root) -> keyless.KeylessSigner:
    """Verify and require an accepted signer, as the loader does for a variant with no other signature."""
    identities = keyless.identities(accepted)
    signer = keyless.verify_bundle(artifact, (DATA / bundle).read_bytes(), identities, root)
    keyless.require_accepted(signer, identities)
    return signer


def test_default_identities_are_the_ones_stock_kernels_accepts():
    ours = {(i.repository, i.signer) for i in keyless.identities()}
    theirs = {(f"https://github.com/{p.repo_id}", uri) for p in DEFAULT_POLICIES for uri in p.signer_uris}
    assert ours == theirs


def test_recorded_bundle_verifies_and_names_its_signer(root):
    signer = _verify((DATA / "a.txt").read_bytes(), "a.txt.sigstore.json", [BEACON], root)
    assert signer.signer == signer.accepted_as == BEACON and signer.issuer == keyless.GITHUB_ISSUER
    assert (
        signer.repository == "https://github.com/sigstore-conformance/extremely-dangerous-public-oidc-beacon"
    )
    # A ref pattern accepts every run of that workflow on a matching ref.
    pattern = BEACON.replace("@refs/heads/main", "@refs/heads/*")
    matched = _verify((DATA / "a.txt").read_bytes(), "a.txt.sigstore.json", [pattern], root)
    assert matched.signer == BEACON and matched.accepted_as == pattern


def test_wrong_identity_is_refused(root, monkeypatch):
    monkeypatch.delenv(constants.SIGSTORE_IDENTITIES, raising=False)
    # A valid signature by a publisher the policy (kernels-community's workflows) does not name.
    signer = keyless.verify_bundle(
        (DATA / "a.txt").read_bytes(), (DATA / "a.txt.sigstore.json").read_bytes(), keyless.identities(), root
    )
    assert signer.signer == BEACON and signer.accepted_as is None
    with pytest.raises(SignatureError, match="not an accepted identity") as e:
        _verify((DATA / "a.txt").read_bytes(), "a.txt.sigstore.json", None, root)
    assert "kernels-community" in str(e.value) and "extremely-dangerous-oidc-beacon.yml" in str(e.value)
    # Same repository and workflow file, another ref: still refused.
    with pytest.raises(SignatureError, match="not an accepted identity"):
        _verify(
            (DATA / "a.txt").read_bytes(),
            "a.txt.sigstore.json",
            [BEACON.replace("@refs/heads/main", "@refs/tags/*")],
            root,
        )


def test_tampered_metadata_is_refused(root):
    data = bytearray((DATA / "a.txt").read_bytes())
    data[-2] ^= 1
    with pytest.raises(
        SignatureError, match="does not verify over this metadata.json.*changed after signing"
    ):
        _verify(bytes(data), "a.txt.sigstore.json", [BEACON], root)


def test_bundle_for_other_bytes_is_refused(root):
    # A real bundle by an accepted workflow, but over a wheel, not over these bytes.
    with pytest.raises(SignatureError, match="digest mismatch"):
        _verify(
            (DATA / "a.txt").read_bytes(), "rfc8785-0.1.2-py3-none-any.whl.sigstore.json", [RFC8785], root
        )


def test_not_a_bundle_is_refused(root):
    with pytest.raises(SignatureError, match="not a valid sigstore bundle"):
        keyless.verify_bundle(b"{}", b'{"mediaType": "nope"}', keyless.identities([BEACON]), root)


def test_trusted_root_sources(monkeypatch, tmp_path):
    monkeypatch.setenv(constants.SIGSTORE_ROOT, str(DATA / "trusted_root.json"))
    from_env = keyless.trusted_root()
    _verify((DATA / "a.txt").read_bytes(), "a.txt.sigstore.json", [BEACON], from_env)
    # Without one: sigstore-python's cached production root, read offline (its cache here is empty,
    # so it is the root embedded in the package).
    monkeypatch.delenv(constants.SIGSTORE_ROOT)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    _verify((DATA / "a.txt").read_bytes(), "a.txt.sigstore.json", [BEACON], keyless.trusted_root())
    monkeypatch.setenv(constants.SIGSTORE_ROOT, str(tmp_path / "missing.json"))
    with pytest.raises(SignatureError, match=constants.SIGSTORE_ROOT):
        keyless.trusted_root()


def test_identity_configuration_errors(monkeypatch):
    for bad in (["https://example.com/x"], ["https://github.com/o/r/.github/workflows/w.yml"], []):
        with pytest.raises(UsageError):
            keyless.identities(bad)
    with pytest.raises(UsageError, match="list"):
        keyless.identities(BEACON)
    monkeypatch.setenv(constants.SIGSTORE_IDENTITIES, f"{BEACON} {RFC8785}")
    assert [i.signer for i in keyless.identities()] == [BEACON, RFC8785]
