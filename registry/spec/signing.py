"""Ed25519 signatures over a variant's `metadata.json` (which holds every file's digest).

The signature file `build/<variant>/metadata.json.sig` is two lines: the key id, then the base64
signature over the exact bytes of `metadata.json`. Public keys are registered per namespace on the hub
(`/api/kernel-hub/keys/{ns}`) and shipped in every published version as `keys/<key id>.pub` (for hubs
without that route, e.g. the Hugging Face Hub); the key id lets a verifier pick the right one among several.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from registry import constants
from registry.atomic import write_atomic
from registry.errors import KernelHubError


class SignatureError(KernelHubError, ValueError):
    """metadata.json's signature is missing, malformed, from an unknown key, or does not match."""


KEYS_DIR = "keys"  # repo folder of the publisher keys a version ships: keys/<key id>.pub


def key_file_path(kid: str) -> str:
    """Repo path of a shipped public key: `keys/<key id>.pub`."""
    return f"{KEYS_DIR}/{kid}.pub"


def key_file_text(pub_b64: str) -> str:
    """Contents of `keys/<key id>.pub`: the base64 raw public key and a newline."""
    return f"{pub_b64}\n"


def read_key_file(path: str, text: str) -> str:
    """The base64 key a shipped `keys/<key id>.pub` holds; SignatureError if malformed or not the key its name says."""
    pub = text.strip()
    kid = key_id(pub)
    if path.rsplit("/", 1)[-1] != f"{kid}.pub":
        raise SignatureError(f"{path} holds key {kid}, not the key its name says")
    return pub


def generate_key() -> Ed25519PrivateKey:
    """A fresh publisher key."""
    return Ed25519PrivateKey.generate()


def load_private_key(path: str | os.PathLike) -> Ed25519PrivateKey:
    """Read an unencrypted PKCS#8 PEM ed25519 private key (as `save_private_key` writes it)."""
    data = Path(path).read_bytes()
    key = serialization.load_pem_private_key(data, password=None)
    if not isinstance(key, Ed25519PrivateKey):
        raise TypeError(f"{path} holds a {type(key).__name__}, not an ed25519 private key")
    return key


def save_private_key(key: Ed25519PrivateKey, path: str | os.PathLike) -> None:
    """Write `key` as PKCS#8 PEM, readable only by the owner (created exclusively: never overwrites).

    A concurrent reader sees either no file or the whole key, never a half-written one; a concurrent
    creator gets FileExistsError.
    """
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    write_atomic(Path(path), pem, replace=False)


def default_key_path(namespace: str) -> Path:
    """Where the publisher key for `namespace` lives: `$KERNEL_HUB_KEY`, else ~/.config/kernel-hub/keys/<ns>.pem."""
    env = constants.signing_key()
    if env:
        return Path(env).expanduser()
    return Path.home() / ".config" / "kernel-hub" / "keys" / f"{namespace}.pem"


def load_or_create_key(path: str | os.PathLike) -> tuple[Ed25519PrivateKey, bool]:
    """The key at `path`, creating it on first use; the flag says whether it was just created."""
    path = Path(path)
    if path.exists():
        return load_private_key(path), False
    key = generate_key()
    try:
        save_private_key(key, path)
    except FileExistsError:  # another publisher created it between the check and the write
        return load_private_key(path), False
    return key, True


def public_key_b64(key: Ed25519PrivateKey | Ed25519PublicKey) -> str:
    """Base64 of the raw 32-byte public key (the form the hub stores)."""
    pub = key.public_key() if isinstance(key, Ed25519PrivateKey) else key
    raw = pub.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return base64.b64encode(raw).decode("ascii")


def key_id(pub_b64: str) -> str:
    """First 16 hex digits of the sha256 of the raw public key."""
    return hashlib.sha256(_decode_public_key(pub_b64)).hexdigest()[:16]


def sign_metadata(metadata_bytes: bytes, key: Ed25519PrivateKey) -> str:
    """Text of `metadata.json.sig`: "<key id>\\n<base64 signature>\\n"."""
    signature = base64.b64encode(key.sign(metadata_bytes)).decode("ascii")
    return f"{key_id(public_key_b64(key))}\n{signature}\n"


def verify_metadata(metadata_bytes: bytes, sig_text: str, public_keys_b64: list[str]) -> str:
    """Check `sig_text` over `metadata_bytes` against the trusted keys; return the signing key id.

    Raises SignatureError saying what failed: malformed file, key not among the trusted ones, or a
    signature that does not match these bytes (tampered metadata or wrong key).
    """
    lines = sig_text.strip().splitlines()
    if len(lines) != 2:
        raise SignatureError(
            f"metadata.json.sig must have 2 lines (key id, base64 signature), found {len(lines)}"
        )
    kid, sig_b64 = lines[0].strip(), lines[1].strip()
    try:
        signature = base64.b64decode(sig_b64, validate=True)
    except binascii.Error as e:
        raise SignatureError(f"metadata.json.sig: signature is not valid base64 ({e})") from None
    trusted = {key_id(k): k for k in public_keys_b64}
    if kid not in trusted:
        known = ", ".join(sorted(trusted)) or "none"
        raise SignatureError(
            f"metadata.json is signed by key {kid}, which is not registered for this namespace "
            f"(registered: {known})"
        )
    public = Ed25519PublicKey.from_public_bytes(_decode_public_key(trusted[kid]))
    try:
        public.verify(signature, metadata_bytes)
    except InvalidSignature:
        raise SignatureError(
            f"metadata.json does not match its signature by key {kid}: the file was changed after signing"
        ) from None
    return kid


ENDORSEMENT_PREFIX = b"kernel-hub publisher key endorsement v1\n"


def endorsement_file_path(kid: str) -> str:
    """Repo path of the rotation chain that leads to key `kid`: `keys/<key id>.endorsement`, a JSON list of
    links `{"id", "public_key", "endorsed_by", "endorsement"}`, oldest first (for hubs without a key route)."""
    return f"{KEYS_DIR}/{kid}.endorsement"


def endorsement_message(namespace: str, new_pub_b64: str) -> bytes:
    """The bytes a current key signs to let `new_pub_b64` sign for `namespace` too (a deliberate rotation)."""
    return ENDORSEMENT_PREFIX + f"{namespace}\n{key_id(new_pub_b64)}\n{new_pub_b64}\n".encode()


def sign_endorsement(key: Ed25519PrivateKey, namespace: str, new_pub_b64: str) -> str:
    """Base64 signature by `key` (a current key of `namespace`) endorsing `new_pub_b64`."""
    return base64.b64encode(key.sign(endorsement_message(namespace, new_pub_b64))).decode("ascii")


def verify_endorsement(namespace: str, new_pub_b64: str, signer_pub_b64: str, signature_b64: str) -> None:
    """Raise SignatureError unless `signer_pub_b64` signed the endorsement of `new_pub_b64` for `namespace`."""
    try:
        signature = base64.b64decode(signature_b64, validate=True)
    except (binascii.Error, TypeError) as e:
        raise SignatureError(f"endorsement of key {key_id(new_pub_b64)} is not valid base64 ({e})") from None
    public = Ed25519PublicKey.from_public_bytes(_decode_public_key(signer_pub_b64))
    try:
        public.verify(signature, endorsement_message(namespace, new_pub_b64))
    except InvalidSignature:
        raise SignatureError(
            f"the endorsement of key {key_id(new_pub_b64)} for {namespace} is not signed by key "
            f"{key_id(signer_pub_b64)}"
        ) from None


def _decode_public_key(pub_b64: str) -> bytes:
    try:
        raw = base64.b64decode(pub_b64, validate=True)
    except binascii.Error as e:
        raise SignatureError(f"public key {pub_b64!r} is not valid base64 ({e})") from None
    if len(raw) != 32:
        raise SignatureError(f"public key {pub_b64!r} is {len(raw)} bytes, an ed25519 key has 32")
    return raw
