"""A team's publisher key: export it where it lives, import it on a teammate's machine or a CI runner, and
rotate to a new key on purpose (the current key signs the new one in: `registry/spec/signing.py`).

One namespace signs with one key its consumers pinned (docs/CONTRACTS.md "Trust"); the hub refuses a second
key that nobody added on purpose (`KeyNotAllowed`), so sharing the key, or rotating it, are the two ways a
team and its CI publish together.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from registry.atomic import write_atomic
from registry.spec import signing

from .errors import PublishError

log = logging.getLogger(__name__)


def _pem(key: Ed25519PrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _load(path: Path, what: str) -> Ed25519PrivateKey:
    try:
        return signing.load_private_key(path)
    except FileNotFoundError:
        raise PublishError(f"no {what} at {path}; pass --key FILE or set KERNEL_HUB_KEY") from None
    except (ValueError, TypeError) as e:
        raise PublishError(f"{path} is not an ed25519 private key in PEM ({e}); check the file") from None


def export_key(namespace: str, key_path: Path | None) -> tuple[bytes, str]:
    """(PEM of the namespace's private key, its key id), for `kernel-hub key export`."""
    path = Path(key_path) if key_path else signing.default_key_path(namespace)
    key = _load(path, f"publisher key of {namespace}")
    return _pem(key), signing.key_id(signing.public_key_b64(key))


def import_key(
    namespace: str, source: str, key_path: Path | None, *, force: bool = False
) -> tuple[Path, str]:
    """Install the PEM in `source` (a file, or `-` for stdin) as the namespace's key; returns (path, key id).

    A different key already there is refused unless `force`: it may be the only copy of a key in use.
    """
    data = sys.stdin.buffer.read() if source == "-" else Path(source).read_bytes()
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as e:
        raise PublishError(f"{source} is not an unencrypted PEM private key ({e}); export it with "
                           f"`kernel-hub key export {namespace}`") from None  # fmt: skip
    if not isinstance(key, Ed25519PrivateKey):
        raise PublishError(f"{source} holds a {type(key).__name__}, not an ed25519 publisher key")
    kid = signing.key_id(signing.public_key_b64(key))
    path = Path(key_path) if key_path else signing.default_key_path(namespace)
    if path.exists():
        old = _load(path, "key")
        old_id = signing.key_id(signing.public_key_b64(old))
        if old_id == kid:
            return path, kid
        if not force:
            raise PublishError(
                f"{path} already holds key {old_id}, not {kid}: move it away first (it may be the only copy "
                "of a key in use), or pass --force to replace it"
            )
    write_atomic(path, _pem(key))  # mode 0600
    return path, kid


@dataclass
class Rotation:
    namespace: str
    old_id: str
    new_id: str
    new_path: Path
    retired: Path | None  # where the old key went when the new one took its file
    registered: bool  # the hub's key route took it (False: a hub without one; the repo carries the chain)


def _chain_file(key_path: Path) -> Path:
    return key_path.with_name(key_path.name + ".endorsement")


def read_chain(key_path: Path, pub: str) -> list[dict] | None:
    """The rotation chain kept beside a key file (`<key>.endorsement`) when it ends at this key, else None."""
    try:
        chain = json.loads(_chain_file(Path(key_path)).read_text())
    except (OSError, ValueError):
        return None
    if (
        isinstance(chain, list)
        and chain
        and isinstance(chain[-1], dict)
        and chain[-1].get("public_key") == pub
    ):
        return chain
    return None


def rotate_key(
    namespace: str,
    *,
    endpoint: str | None,
    token: str | None,
    key_path: Path | None = None,
    new_key_path: Path | None = None,
) -> Rotation:
    """Add a new publisher key for `namespace`, endorsed by the current one, so pinned loaders follow it.

    The endorsement goes to the hub's key route where there is one, and always into `<new key>.endorsement`
    beside the new key (with the chain that led to the current key), which `publish` ships as
    `keys/<id>.endorsement` for loaders of hubs without the route. Without `new_key_path` a fresh key takes
    the current key's file and the old key is kept beside it as `<file>.retired-<key id>`; with it, that
    file's key (created when missing) is endorsed and nothing moves.
    """
    from registry.wire import KEYS_ROUTE, HubClient, said

    path = Path(key_path) if key_path else signing.default_key_path(namespace)
    old = _load(path, f"current publisher key of {namespace}")
    old_pub = signing.public_key_b64(old)
    if new_key_path is not None:
        new, _ = signing.load_or_create_key(new_key_path)
    else:
        new = signing.generate_key()
    new_pub = signing.public_key_b64(new)
    old_id, new_id = signing.key_id(old_pub), signing.key_id(new_pub)
    if old_id == new_id:
        raise PublishError(f"{new_key_path} is the current key {old_id}; rotate to a different key")
    client = HubClient.at(endpoint, token)
    listed = client.namespace_keys(namespace)
    if listed and old_id not in {k.get("id") for k in listed}:
        raise PublishError(
            f"{path} holds key {old_id}, which is not a key of {namespace} on {client.endpoint} "
            f"({', '.join(k.get('id', '?') for k in listed)}); rotate from a machine with a current key"
        )
    link = {
        "id": new_id,
        "public_key": new_pub,
        "endorsed_by": old_id,
        "endorsement": signing.sign_endorsement(old, namespace, new_pub),
    }
    chain = [*(read_chain(path, old_pub) or []), link]
    pending = None
    if new_key_path is None:  # on disk before the hub knows it: a crash never leaves a key nobody holds
        pending = path.with_name(f"{path.name}.pending-{new_id}")
        write_atomic(pending, _pem(new))
    if listed is not None:
        r = client.post(
            f"{KEYS_ROUTE}/{namespace}", {k: link[k] for k in ("public_key", "endorsed_by", "endorsement")}
        )
        if r.status_code >= 400:
            if pending is not None:
                pending.unlink()
            raise PublishError(f"{client.endpoint} refused the rotation ({r.status_code}: {said(r)})")
    retired = None
    new_path = Path(new_key_path) if new_key_path else path
    if pending is not None:
        retired = path.with_name(f"{path.name}.retired-{old_id}")
        write_atomic(retired, _pem(old))
        if _chain_file(path).exists():
            os.replace(_chain_file(path), _chain_file(retired))
        os.replace(pending, path)
        log.info("old key %s kept as %s", old_id, retired)
    write_atomic(_chain_file(new_path), json.dumps(chain, indent=1).encode())
    return Rotation(namespace, old_id, new_id, new_path, retired, listed is not None)
