"""Digests match what `kernels` computes; signatures catch tampering and unknown keys."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from kernels._rust import Digest, DigestAlgorithm

from registry.spec import digest, signing


def _variant(root: Path) -> Path:
    v = root / "torch-cpu"
    (v / "fused_mlp" / "__pycache__").mkdir(parents=True)
    (v / "fused_mlp" / "triton").mkdir()
    (v / "fused_mlp" / "__init__.py").write_text("__all__ = ['mlp']\n")
    (v / "fused_mlp" / "triton" / "k.py").write_text("x = 1\n")
    (v / "fused_mlp" / "__pycache__" / "m.cpython-311.pyc").write_bytes(b"\0bytecode")
    (v / "fused_mlp" / "stray.pyc").write_bytes(b"\0")
    (v / "fused_mlp" / ".hidden").write_text("h")
    (v / "fused_mlp" / "metadata.json").write_text("{}")  # nested metadata.json is digested
    (v / "metadata.json.sigstore").write_text("bundle")
    return v


def test_hash_variant_matches_kernels_rules(tmp_path):
    v = _variant(tmp_path)
    ours = digest.hash_variant(v)
    theirs = Digest.hash_variant(DigestAlgorithm.SHA256, v).files
    assert ours == dict(theirs)
    assert set(ours) == {
        "fused_mlp/__init__.py",
        "fused_mlp/triton/k.py",
        "fused_mlp/.hidden",
        "fused_mlp/metadata.json",
    }
    assert list(ours) == sorted(ours)


def test_signature_file_is_not_digested(tmp_path):
    v = _variant(tmp_path)
    before = digest.hash_variant(v)
    (v / "metadata.json.sig").write_text("id\nsig\n")
    (v / "metadata.json").write_text("{}")
    assert digest.hash_variant(v) == before


def test_verify_digests_reports_changed_missing_and_extra(tmp_path):
    v = _variant(tmp_path)
    meta = {"digest": {"algorithm": "sha256", "files": digest.hash_variant(v)}}
    assert digest.verify_digests(v, meta) == []
    (v / "fused_mlp" / "__init__.py").write_text("__all__ = ['evil']\n")
    (v / "fused_mlp" / "triton" / "k.py").unlink()
    (v / "fused_mlp" / "added.py").write_text("")
    problems = digest.verify_digests(v, meta)
    assert len(problems) == 3
    assert any(p.startswith("changed file fused_mlp/__init__.py") for p in problems)
    assert any(p.startswith("missing file fused_mlp/triton/k.py") for p in problems)
    assert any(p.startswith("extra file fused_mlp/added.py") for p in problems)


def test_verify_digests_without_digest_table(tmp_path):
    v = _variant(tmp_path)
    assert digest.verify_digests(v, {})[0].startswith("metadata.json has no digest")
    bad = {"digest": {"algorithm": "md5", "files": {}}}
    assert "not supported" in digest.verify_digests(v, bad)[0]


def test_sign_and_verify_round_trip():
    key = signing.generate_key()
    pub = signing.public_key_b64(key)
    data = json.dumps({"id": "x", "digest": {"files": {"a": "b"}}}).encode()
    sig = signing.sign_metadata(data, key)
    kid, _signature = sig.splitlines()
    assert kid == signing.key_id(pub) and len(kid) == 16 and sig.endswith("\n")
    other = signing.public_key_b64(signing.generate_key())
    assert signing.verify_metadata(data, sig, [other, pub]) == kid


def test_verify_refuses_tampered_metadata_and_unknown_key():
    key, other = signing.generate_key(), signing.generate_key()
    data = b'{"digest": {"files": {"a": "b"}}}'
    sig = signing.sign_metadata(data, key)
    with pytest.raises(signing.SignatureError, match="changed after signing"):
        signing.verify_metadata(data.replace(b'"b"', b'"c"'), sig, [signing.public_key_b64(key)])
    with pytest.raises(signing.SignatureError, match="not registered"):
        signing.verify_metadata(data, sig, [signing.public_key_b64(other)])
    # A signature made by another key but labelled with the trusted key's id.
    forged = signing.sign_metadata(data, other).splitlines()[1]
    with pytest.raises(signing.SignatureError, match="changed after signing"):
        signing.verify_metadata(data, f"{sig.splitlines()[0]}\n{forged}\n", [signing.public_key_b64(key)])
    with pytest.raises(signing.SignatureError, match="2 lines"):
        signing.verify_metadata(data, "just-one-line", [signing.public_key_b64(key)])


def test_key_file_round_trip_and_load_or_create(tmp_path, monkeypatch):
    path = tmp_path / "keys" / "org.pem"
    key, created = signing.load_or_create_key(path)
    assert created and (path.stat().st_mode & 0o777) == 0o600
    again, created_again = signing.load_or_create_key(path)
    assert not created_again
    assert signing.public_key_b64(again) == signing.public_key_b64(key)
    monkeypatch.setenv("KERNEL_HUB_KEY", str(path))
    assert signing.default_key_path("org") == path
    monkeypatch.delenv("KERNEL_HUB_KEY")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert signing.default_key_path("org") == tmp_path / ".config/kernel-hub/keys/org.pem"


def test_concurrent_first_use_of_a_key_file_gives_every_caller_the_same_whole_key(tmp_path):
    """Publishers racing to create the key see no half-written PEM: one creates it, the rest load it."""
    path = tmp_path / "keys" / "acme.pem"
    barrier = threading.Barrier(8)
    results: list = []

    def first_use():
        barrier.wait()
        try:
            key, created = signing.load_or_create_key(path)
            results.append((signing.public_key_b64(key), created))
        except Exception as e:  # noqa: BLE001 - the test inspects the error
            results.append(e)

    threads = [threading.Thread(target=first_use) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert all(isinstance(r, tuple) for r in results) and len(results) == 8, results
    assert len({pub for pub, _ in results}) == 1
    assert sum(created for _, created in results) == 1
    assert [p.name for p in path.parent.iterdir()] == ["acme.pem"]  # no temp file left behind
