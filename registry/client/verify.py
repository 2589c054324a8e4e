"""Verification of a downloaded variant: the signature over metadata.json by a trusted key (ed25519 given by the
user or pinned for the namespace; a sigstore bundle against the identity policy), then every file's digest.
A damaged cache file is fetched once more; a `$LOCAL_KERNELS` folder is the user's own and is not verified.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from registry import constants
from registry.spec.digest import mismatches
from registry.spec.signing import SignatureError
from registry.spec.variant import METADATA, SIGNATURE, SIGSTORE

from .fetch import FetchError, download_variant, drop_cached, refetch
from .plan import Load, Refused
from .trust import Untrusted, verify_keyless_signature, verify_signature


class Damaged(Refused):
    """Verification failed on files that a fresh download might repair (`paths`, variant-relative)."""

    def __init__(self, message: str, paths: list[str]):
        super().__init__(message)
        self.paths = paths


def verify_variant(load: Load, path: Path, skipped: Sequence[str] = ()) -> dict:
    """The signature over metadata.json by a trusted key, then every file's digest; returns what was verified.

    Raises Refused for an unsigned build (unless allowed) or an untrusted key, Damaged for a signature or
    digest that does not match the files.
    """
    meta_bytes = (path / METADATA).read_bytes()
    sig_path, bundle_path = path / SIGNATURE, path / SIGSTORE
    if not sig_path.is_file() and not bundle_path.is_file():
        if not constants.allow_unsigned():
            raise Refused(
                f"unsigned: build/{path.name} has no {SIGNATURE} or {SIGSTORE} (republish with `kernel-hub "
                f"publish`, or set {constants.ALLOW_UNSIGNED}=1 to accept unsigned builds)"
            )
        keys = {"key_id": None, "keys": "unsigned (allowed)", "pin_file": None}
    elif not sig_path.is_file():
        keys = {"key_id": None, "keys": None, "pin_file": None}  # the keyless signature decides below
    else:
        try:
            decision = verify_signature(
                load.hub, load.repo_id, load.commit, meta_bytes, sig_path.read_text(), load.keys
            )
        except SignatureError as e:
            raise Damaged(f"signature: {e}", [METADATA, SIGNATURE]) from e
        except Untrusted as e:
            raise Refused(f"untrusted key: {e}") from e
        keys = {"key_id": decision.key_id, "keys": decision.how, "pin_file": decision.pin_file}
    keyless = None
    if bundle_path.is_file():
        try:
            signer = verify_keyless_signature(
                load.hub,
                load.repo_id,
                meta_bytes,
                bundle_path.read_bytes(),
                load.sigstore_identities,
                other_trusted=sig_path.is_file(),
            )
        except SignatureError as e:
            raise Damaged(f"sigstore: {e}", [METADATA, SIGSTORE]) from e
        except Untrusted as e:
            raise Refused(f"untrusted keyless signer: {e}") from e
        keyless = {"signer": signer.signer, "repository": signer.repository, "trusted": signer.how}
        if keys["keys"] is None:
            keys = {"key_id": None, "keys": f"sigstore ({signer.how})", "pin_file": signer.pin_file}
    try:
        metadata = json.loads(meta_bytes)
    except json.JSONDecodeError as e:
        raise Refused(f"{METADATA} is not JSON: {e}") from e
    problems = mismatches(path, metadata, absent_ok=skipped)
    if METADATA in problems:
        raise Refused(problems[METADATA])
    if problems:
        lines = list(problems.values())
        more = f" (+{len(lines) - 3} more)" if len(lines) > 3 else ""
        raise Damaged("digest mismatch: " + "; ".join(lines[:3]) + more, list(problems))
    return {
        "signed_by": keys["key_id"],
        "files": len(metadata["digest"]["files"]) - len(skipped),
        "skipped": len(skipped),
        "sigstore": keyless,
        "trust": {"publisher": load.publisher, **keys},
    }


def fetch_verified(load: Load, name: str) -> tuple[Path, dict]:
    """Download what this machine runs of `build/<name>` and verify it; damaged cached files are fetched once more.

    A LOCAL_KERNELS folder is the user's own: used as it is, nothing verified (as stock kernels).
    """
    if load.local is not None:
        files = (load.metas[name].get("digest") or {}).get("files") or {}
        trust = {
            "publisher": load.publisher,
            "key_id": None,
            "keys": "not verified (local files)",
            "pin_file": None,
        }
        return load.local[name], {"signed_by": None, "files": len(files), "skipped": 0, "trust": trust}
    try:
        path, skipped = download_variant(load.hub, load.repo_id, load.commit, name, load.wanted)
        return path, verify_variant(load, path, skipped)
    except FetchError as e:
        raise Refused(str(e)) from e
    except Damaged as e:
        damaged = e
    drop_cached(path, damaged.paths)
    try:
        refetch(load.hub, load.repo_id, load.commit, name, damaged.paths)
        verification = verify_variant(load, path, skipped)
    except FetchError as e:
        raise Refused(f"{damaged} (in the cache; {e})") from e
    except Damaged as e:
        raise Refused(f"{e} (downloaded again: the hub serves these bytes)") from e
    verification["repaired"] = sorted(damaged.paths)
    return path, verification
