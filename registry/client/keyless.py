"""Keyless signatures: `metadata.json.sigstore` (a sigstore bundle, as kernels-community ships) checked offline.

The bundle must verify over the exact bytes of `metadata.json` against a trusted root (no network: a file
the user names, else the root sigstore-python keeps in its own cache, embedded in the package until a
`sigstore` command refreshes it) and its certificate must name a GitHub Actions workflow the user accepts.
Accepted workflows are signer URIs `https://github.com/<owner>/<repo>/.github/workflows/<file>@<ref>`
(`*` matches any characters, e.g. `@refs/tags/v*`): `get_kernel(sigstore_identities=[...])`, else
`$KERNEL_HUB_SIGSTORE_IDENTITIES` (whitespace-separated), else the kernels-community workflows that stock
`kernels verify-signature` accepts. Failures raise `spec.signing.SignatureError`, like ed25519 ones.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from cryptography import x509
from cryptography.hazmat import asn1

from registry import constants
from registry.errors import UsageError
from registry.spec.signing import SignatureError

if TYPE_CHECKING:
    from sigstore.models import TrustedRoot

# sigstore (and the pydantic models under it) is imported where a bundle is checked, not at import: it took
# most of a warm get_kernel's time, for the many variants without a bundle.

GITHUB_ISSUER = "https://token.actions.githubusercontent.com"
# kernels 0.17.2 `kernels.verify.DEFAULT_POLICIES` (tests/loader/test_keyless.py keeps the two equal).
KERNELS_COMMUNITY = tuple(
    f"https://github.com/huggingface/kernels-community/.github/workflows/{w}@refs/heads/main"
    for w in ("build.yaml", "build-mac.yaml", "build-windows.yaml", "sign-old-builds.yaml")
)
_SIGNER = re.compile(r"(https://github\.com/[^/\s]+/[^/\s]+)/\.github/workflows/[^@\s]+@\S+")
# Fulcio certificate extensions (github.com/sigstore/fulcio docs/oid-info.md).
_ISSUER_OID = x509.ObjectIdentifier("1.3.6.1.4.1.57264.1.8")
_SIGNER_OID = x509.ObjectIdentifier("1.3.6.1.4.1.57264.1.9")
_REPOSITORY_OID = x509.ObjectIdentifier("1.3.6.1.4.1.57264.1.12")


@dataclass(frozen=True)
class WorkflowIdentity:
    """One accepted signer: a GitHub Actions workflow URI (with `*` wildcards) of one repository."""

    signer: str
    issuer: str = GITHUB_ISSUER

    @classmethod
    def parse(cls, text: str) -> WorkflowIdentity:
        m = _SIGNER.fullmatch(text.strip())
        if not m or "*" in m.group(1):
            raise UsageError(
                f"sigstore identity {text!r} must look like "
                "https://github.com/<owner>/<repo>/.github/workflows/<file>@<ref> (the ref may use *)"
            )
        return cls(m.group(0))

    @property
    def repository(self) -> str:
        """`https://github.com/<owner>/<repo>`: the certificate's source repository must be this one."""
        m = _SIGNER.fullmatch(self.signer)
        assert m is not None, self.signer
        return m.group(1)

    def verify(self, cert: x509.Certificate) -> None:
        """sigstore VerificationPolicy: issuer, source repository and workflow all match, else VerificationError."""
        found = certificate_identity(cert)
        problems = [
            f"{what} {got!r} is not {want!r}"
            for what, got, want in (
                ("issuer", found.issuer, self.issuer),
                ("source repository", found.repository, self.repository),
            )
            if got != want
        ]
        if not fnmatch.fnmatchcase(found.signer or "", self.signer):
            problems.append(f"workflow {found.signer!r} does not match {self.signer!r}")
        if problems:
            from sigstore.errors import VerificationError

            raise VerificationError("; ".join(problems))


@dataclass(frozen=True)
class KeylessSigner:
    """Who signed, as the certificate says: OIDC issuer, source repository and workflow (signer) URI."""

    issuer: str | None
    repository: str | None
    signer: str | None
    accepted_as: str | None = None  # the accepted identity (pattern) it matched; None: not one of them


def certificate_identity(cert: x509.Certificate) -> KeylessSigner:
    """The identity a Fulcio certificate carries (None for an extension it lacks)."""

    def ext(oid: x509.ObjectIdentifier) -> str | None:
        try:
            raw = cert.extensions.get_extension_for_oid(oid).value
        except x509.ExtensionNotFound:
            return None
        try:
            return asn1.decode_der(str, raw.value)  # type: ignore[attr-defined]
        except ValueError:
            return None

    return KeylessSigner(ext(_ISSUER_OID), ext(_REPOSITORY_OID), ext(_SIGNER_OID))


def identities(configured: Sequence[str] | None = None) -> tuple[WorkflowIdentity, ...]:
    """The accepted signers: `configured`, else `$KERNEL_HUB_SIGSTORE_IDENTITIES`, else kernels-community's."""
    if configured is None:
        configured = constants.sigstore_identities() or KERNELS_COMMUNITY
    if isinstance(configured, str):
        raise UsageError("sigstore identities must be a list of workflow URIs, not one string")
    found = tuple(WorkflowIdentity.parse(c) for c in configured)
    if not found:
        raise UsageError("an empty list of sigstore identities would accept no signer")
    return found


def trusted_root(path: Path | str | None = None) -> TrustedRoot:
    """The sigstore trusted root, offline: `path`, else `$KERNEL_HUB_SIGSTORE_ROOT`, else sigstore-python's cached one."""
    from sigstore.errors import Error as SigstoreError
    from sigstore.models import ClientTrustConfig, TrustedRoot

    path = path or constants.sigstore_root()
    try:
        if path is not None:
            return TrustedRoot.from_file(str(path))
        return ClientTrustConfig.production(offline=True).trusted_root
    except (OSError, ValueError, SigstoreError) as e:
        where = f"{path}" if path else "sigstore-python's cache"
        raise SignatureError(
            f"no usable sigstore trusted root ({where}: {e}); set {constants.SIGSTORE_ROOT} to a trusted_root.json"
        ) from e


class _AnySigner:
    """A sigstore VerificationPolicy that accepts every certificate: the identity is judged after
    verification (`KeylessSigner.accepted_as`), so a valid bundle by another publisher is told apart
    from a broken one."""

    def verify(self, cert: x509.Certificate) -> None:
        return None


def verify_bundle(
    metadata_bytes: bytes,
    bundle_bytes: bytes,
    accepted: Sequence[WorkflowIdentity],
    root: TrustedRoot,
) -> KeylessSigner:
    """Check that `bundle_bytes` is a valid sigstore signature over exactly `metadata_bytes`.

    Verified offline against `root`: the certificate chain to Fulcio, the transparency log entry and the
    signature. Raises SignatureError when any fails. The returned signer's `accepted_as` is the `accepted`
    identity its workflow matches (None: a valid signature by a publisher the policy does not name).
    """
    from sigstore.errors import Error as SigstoreError
    from sigstore.errors import VerificationError
    from sigstore.models import Bundle, InvalidBundle
    from sigstore.verify import Verifier

    try:
        bundle = Bundle.from_json(bundle_bytes)
    except (InvalidBundle, ValueError) as e:
        raise SignatureError(f"metadata.json.sigstore is not a valid sigstore bundle: {e}") from e
    cert = bundle.signing_certificate
    signer = certificate_identity(cert)
    try:
        Verifier(trusted_root=root).verify_artifact(metadata_bytes, bundle, _AnySigner())
    except SigstoreError as e:
        raise SignatureError(
            f"metadata.json.sigstore by {signer.signer} does not verify over this metadata.json ({e}): "
            "the file was changed after signing, or the bundle signs other bytes"
        ) from e
    for identity in accepted:
        try:
            identity.verify(cert)
        except VerificationError:
            continue
        return replace(signer, accepted_as=identity.signer)
    return signer


def require_accepted(signer: KeylessSigner, accepted: Sequence[WorkflowIdentity]) -> str:
    """The accepted identity `signer` matched; SignatureError naming the signer and the policy when none."""
    if signer.accepted_as is None:
        names = ", ".join(i.signer for i in accepted)
        raise SignatureError(
            f"metadata.json.sigstore is signed by workflow {signer.signer} (issuer {signer.issuer}), which is "
            f"not an accepted identity ({names}): set {constants.SIGSTORE_IDENTITIES} or pass sigstore_identities to "
            "accept that publisher"
        )
    return signer.accepted_as
