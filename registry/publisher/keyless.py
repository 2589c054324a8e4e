"""Keyless (sigstore) signatures for the publisher: `metadata.json.sigstore` beside each `metadata.json.sig`.

`kernel-hub publish --sigstore` signs every staged metadata.json with the ambient OIDC identity of the CI
job (GitHub Actions with `permissions: id-token: write`), through Sigstore's public Fulcio and Rekor. A
bundle already in the dist is published only when it signs the exact staged bytes (the version is set at
staging, so sign after it: `kernel-hub publish --sigstore`, or a dist built for that version).
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from .errors import PublishError


def bundle_problem(bundle_bytes: bytes, metadata_bytes: bytes) -> str | None:
    """Why a sigstore bundle cannot be a signature of `metadata_bytes` (None: its message digest matches).

    Only the digest the bundle names is compared; loaders verify the signature, certificate and log entry.
    """
    try:
        digest = json.loads(bundle_bytes)["messageSignature"]["messageDigest"]
        algorithm, value = digest["algorithm"], digest["digest"]
    except (ValueError, KeyError, TypeError):
        return "is not a sigstore bundle with a message signature"
    expected = base64.b64encode(hashlib.sha256(metadata_bytes).digest()).decode("ascii")
    if algorithm != "SHA2_256" or value != expected:
        return "signs other bytes than the metadata.json being published"
    return None


def ambient_identity() -> str:
    """This CI job's OIDC token for Sigstore; PublishError (before anything is published) when there is none."""
    from sigstore.errors import Error as SigstoreError
    from sigstore.oidc import detect_credential

    try:
        token = detect_credential()
    except SigstoreError as e:
        raise PublishError(f"--sigstore: the CI's OIDC token could not be read ({e})") from e
    if token is None:
        raise PublishError(
            "--sigstore needs an ambient OIDC identity (a GitHub Actions job with `permissions: id-token: "
            "write`); none was found here, so nothing was published"
        )
    return token


@contextmanager
def ambient_signer(token: str) -> Iterator[Callable[[bytes], bytes]]:
    """`sign(metadata_bytes) -> bundle JSON` with the OIDC identity `token`, through Sigstore's public instance."""
    from sigstore.errors import Error as SigstoreError
    from sigstore.models import ClientTrustConfig
    from sigstore.oidc import IdentityToken
    from sigstore.sign import SigningContext

    try:
        context = SigningContext.from_trust_config(ClientTrustConfig.production())
        with context.signer(IdentityToken(token)) as signer:
            yield lambda data: signer.sign_artifact(data).to_json().encode()
    except SigstoreError as e:
        raise PublishError(f"--sigstore: signing failed ({e}); nothing was published") from e
