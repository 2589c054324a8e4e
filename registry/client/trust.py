"""Whether a repo's code may run here: publisher trust (as `kernels`) and the keys its builds must be signed with.

docs/CONTRACTS.md "Trust". Publisher trust: `trust_remote_code` (True, or an allowlist of repo ids), else the
org's `trustedKernelPublisher` flag on the hub, else — without an answer from the hub — what an earlier
online load recorded for the namespace. Keys: the user's (`publisher_keys` / $KERNEL_HUB_PUBLISHER_KEYS),
else those pinned for the namespace on first use, in `<kernel cache>/kernel-hub/trust/<host>/<ns>.json`; a
signature by any other key is refused. Key sources (`KEY_SOURCES`) are asked only on first use.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from httpx2 import HTTPError
from huggingface_hub.errors import HfHubHTTPError

from registry import constants
from registry.atomic import locked, write_atomic
from registry.errors import KernelHubError
from registry.spec.signing import SignatureError, key_id, public_key_b64, verify_metadata

from .fetch import Hub, HubUnreachable
from .repo_keys import RepoKeyFiles
from .rotation import follow_rotation, pin_rotation

PIN_SCHEMA = 1
TrustRemoteCode = bool | list[str]


class Untrusted(KernelHubError, PermissionError):
    """The repo's publisher or signing key is not trusted here; nothing of the repo may run."""


class KeySource(Protocol):
    """Where first use learns a namespace's publisher keys (docs/CONTRACTS.md "Trust")."""

    name: str

    def keys(self, hub: Hub, repo_id: str, commit: str) -> list[str] | None:
        """Base64 raw ed25519 keys of the repo's namespace; None when this hub or repo does not offer them."""
        ...


@dataclass(frozen=True)
class HubKeyRoute:
    """The kernel-hub extension `GET /api/kernel-hub/keys/{ns}` (404: a hub without it)."""

    name: str = "hub key route"

    def keys(self, hub: Hub, repo_id: str, commit: str) -> list[str] | None:
        entries = self.entries(hub, repo_id.split("/", 1)[0])
        return None if entries is None else [k["public_key"] for k in entries]

    def entries(self, hub: Hub, namespace: str) -> list[dict] | None:
        """The route's key entries (`id`, `public_key`, and `endorsed_by` + `endorsement` for a rotation)."""
        return hub.request("list publisher keys", hub.namespace_keys, namespace)


KEY_SOURCES: tuple[KeySource, ...] = (HubKeyRoute(), RepoKeyFiles())


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


class PinFile:
    """The namespace's trust record on this machine: publisher flag seen online, and its pinned keys."""

    def __init__(self, hub: Hub, namespace: str):
        self.hub, self.namespace = hub, namespace
        self.path = hub.own_dir("trust", hub.host, f"{namespace}.json")

    def read(self) -> dict:
        try:
            data = json.loads(self.path.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return {}
        return data if isinstance(data, dict) and data.get("schema") == PIN_SCHEMA else {}

    def update(self, change) -> dict:
        """Apply `change(data)` under the file lock and write the result atomically; returns it."""
        with locked(self.path):
            data = self.read() or {
                "schema": PIN_SCHEMA,
                "endpoint": self.hub.endpoint,
                "namespace": self.namespace,
                "publisher": None,
                "keys": [],
            }
            change(data)
            write_atomic(self.path, json.dumps(data, indent=1).encode())
        return data


def publisher_trust(hub: Hub, repo_id: str, trust_remote_code: TrustRemoteCode, *, ask_hub: bool) -> str:
    """How the repo's publisher is trusted ("trust_remote_code", "trustedKernelPublisher", "recorded"); else Untrusted.

    `ask_hub=False` (a fully cached commit) decides from the pin file without a request.
    """
    if trust_remote_code is True:
        return "trust_remote_code"
    if isinstance(trust_remote_code, list) and repo_id in trust_remote_code:
        return "trust_remote_code"
    namespace = repo_id.split("/", 1)[0]
    advice = f'pass trust_remote_code=True or trust_remote_code=["{repo_id}"] to load it anyway'
    pins = PinFile(hub, namespace)
    if ask_hub and not hub.offline:
        try:
            response = hub.request(
                "check publisher trust",
                hub.get,
                hub.namespace_url("api/organizations", namespace) + "/overview",
            )
        except HubUnreachable:
            pass
        except HfHubHTTPError as e:
            status = e.response.status_code if e.response is not None else "?"
            message = (e.server_message or str(e)).strip().splitlines()[0]
            raise Untrusted(
                f"{repo_id}: could not verify publisher trust: {hub.endpoint} answered {status} {message}; "
                + ("check HF_TOKEN / token=, or " if status in (401, 403) else "")
                + advice
            ) from e
        except (HTTPError, OSError, ValueError) as e:
            raise Untrusted(f"{repo_id}: could not verify publisher trust ({e}); {advice}") from e
        else:
            trusted = bool(response.json().get("trustedKernelPublisher"))
            if (pins.read().get("publisher") or {}).get(
                "trusted_publisher"
            ) is not trusted:  # write on change only
                pins.update(
                    lambda d: d.update(publisher={"trusted_publisher": trusted, "checked_at": _now()})
                )
            if not trusted:
                raise Untrusted(
                    f"{repo_id} is not from a trusted publisher: {namespace} has no trustedKernelPublisher "
                    f"on {hub.endpoint}; {advice}"
                )
            return "trustedKernelPublisher"
    recorded = pins.read().get("publisher") or {}
    if recorded.get("trusted_publisher"):
        return "recorded"
    without = f"without the hub ({hub.offline_reason})" if hub.offline else "without asking the hub"
    raise Untrusted(
        f"cannot verify publisher trust for {namespace} {without}, and no online load recorded it as a "
        f"trusted publisher: load {repo_id} once online, or {advice}"
    )


def user_keys(publisher_keys: Sequence[str] | None) -> list[str] | None:
    """The keys the user gave (argument, else $KERNEL_HUB_PUBLISHER_KEYS) as base64 raw ed25519; None: none given."""
    items = list(publisher_keys) if publisher_keys is not None else None
    if items is None:
        items = constants.publisher_keys()
    if items is None:
        return None
    return [_key_text(item) for item in items]


def _key_text(item: str) -> str:
    """A base64 raw key as is, or the key in a `.pub` (base64 text) / `.pem` (PEM public key) file."""
    path = Path(item)
    if path.is_file():
        raw = path.read_bytes()
        if raw.lstrip().startswith(b"-----BEGIN"):
            key = serialization.load_pem_public_key(raw)
            if not isinstance(key, Ed25519PublicKey):
                raise SignatureError(f"{item} holds a {type(key).__name__}, not an ed25519 public key")
            return public_key_b64(key)
        item = raw.decode().strip()
    key_id(item)  # raises SignatureError naming a malformed key
    return item


def signature_key_id(sig_text: str) -> str:
    """The key id on the first line of `metadata.json.sig` ("" when the file is empty)."""
    lines = sig_text.strip().splitlines()
    return lines[0].strip() if lines else ""


@dataclass(frozen=True)
class KeyDecision:
    """Which keys verified a signature and how they came to be trusted."""

    key_id: str
    how: str  # "given" | "pinned" | "rotation" (endorsed by a pinned key, pinned now) | "first use"
    pin_file: str | None


def verify_signature(
    hub: Hub, repo_id: str, commit: str, meta_bytes: bytes, sig_text: str, given: list[str] | None
) -> KeyDecision:
    """Verify metadata.json's signature by a trusted key (given, pinned, or pinned now on first use).

    Raises SignatureError (wrong signature, malformed file) or Untrusted (a key the namespace is not pinned to,
    or no key to trust).
    """
    if given is not None:
        return KeyDecision(verify_metadata(meta_bytes, sig_text, given), "given", None)
    namespace = repo_id.split("/", 1)[0]
    pins = PinFile(hub, namespace)
    pinned = [k for k in pins.read().get("keys", []) if k.get("kind") == "ed25519"]
    if pinned:
        kid = signature_key_id(sig_text)
        how = "pinned"
        if kid not in {k["id"] for k in pinned}:
            chain = None if hub.offline else follow_rotation(hub, namespace, kid, pinned, repo_id, commit)
            if chain is None:
                first = min(pinned, key=lambda k: k["pinned_at"])
                raise Untrusted(
                    f"signed by key {kid}, but {namespace} on {hub.host} is pinned to key(s) "
                    f"{', '.join(k['id'] for k in pinned)} (pinned {first['pinned_at']} from {first['source']}, "
                    f"{pins.path}), and no rotation signed by a pinned key leads to it. If {namespace} rotated "
                    f"its key on purpose, pass publisher_keys=[<new key>] or delete {pins.path} to pin again on "
                    "the next load; otherwise do not use this build"
                )
            pinned = pins.update(lambda data: pin_rotation(data, chain, _now()))["keys"]
            how = "rotation"
        keys = [k["public_key"] for k in pinned if k.get("kind") == "ed25519"]
        return KeyDecision(verify_metadata(meta_bytes, sig_text, keys), how, str(pins.path))
    if hub.offline:
        raise Untrusted(
            f"no pinned key for {namespace} and {hub.offline_reason}: load {repo_id} once online, "
            "or pass publisher_keys"
        )
    for source in KEY_SOURCES:
        try:
            keys = source.keys(hub, repo_id, commit)
        except HubUnreachable as e:
            raise Untrusted(
                f"no pinned key for {namespace} and {e}: load it once online, or pass publisher_keys"
            ) from e
        if not keys:
            continue
        kid = verify_metadata(meta_bytes, sig_text, keys)
        now = _now()

        def pin(data: dict, keys=keys, name=source.name, now=now) -> None:
            known = {k["id"] for k in data["keys"]}
            data["keys"] += [
                {"id": key_id(k), "kind": "ed25519", "public_key": k, "source": name, "pinned_at": now}
                for k in keys
                if key_id(k) not in known
            ]

        pins.update(pin)
        return KeyDecision(kid, "first use", str(pins.path))
    names = ", ".join(s.name for s in KEY_SOURCES)
    raise Untrusted(
        f"signature cannot be checked: no key source ({names}) lists publisher keys for {namespace!r} on "
        f"{hub.endpoint}; pass publisher_keys"
    )


@dataclass(frozen=True)
class KeylessDecision:
    """Who signed `metadata.json.sigstore` and how that signer came to be trusted."""

    signer: str | None  # the workflow URI in the certificate
    repository: str | None  # its source repository: what is pinned
    how: str  # "given" | "pinned" | "rotation" (endorsed by a pinned key, pinned now) | "first use" | "outside the identity policy"
    pin_file: str | None


def verify_keyless_signature(
    hub: Hub,
    repo_id: str,
    meta_bytes: bytes,
    bundle_bytes: bytes,
    identities: Sequence[str] | None,
    *,
    other_trusted: bool,
) -> KeylessDecision:
    """Verify `metadata.json.sigstore` (keyless.py) and decide whether its signer is trusted.

    The bundle must always be a valid signature over exactly these bytes (SignatureError). Its workflow must
    be in the identity policy (`identities`, else $KERNEL_HUB_SIGSTORE_IDENTITIES: "given", nothing pinned;
    else kernels-community's: pinned per namespace like a key), unless `other_trusted` (a trusted ed25519
    signature already vouches for the build): then a signer outside the policy is only reported. Raises
    Untrusted for a signer outside the policy, or a repository other than the one pinned.
    """
    from . import keyless  # cryptography.x509 and sigstore: only a variant with a bundle needs them

    given = identities is not None or bool(constants.sigstore_identities())
    accepted = keyless.identities(identities)
    signer = keyless.verify_bundle(meta_bytes, bundle_bytes, accepted, keyless.trusted_root())
    if signer.accepted_as is None:
        if other_trusted:
            return KeylessDecision(signer.signer, signer.repository, "outside the identity policy", None)
        try:
            keyless.require_accepted(signer, accepted)
        except SignatureError as e:
            raise Untrusted(str(e)) from None
    if given:
        return KeylessDecision(signer.signer, signer.repository, "given", None)
    namespace = repo_id.split("/", 1)[0]
    pins = PinFile(hub, namespace)
    pinned = [k for k in pins.read().get("keys", []) if k.get("kind") == "sigstore"]
    if pinned:
        if signer.repository not in {k["identity"] for k in pinned}:
            first = min(pinned, key=lambda k: k["pinned_at"])
            raise Untrusted(
                f"signed keyless by {signer.signer}, but {namespace} on {hub.host} is pinned to signing "
                f"repository {', '.join(k['identity'] for k in pinned)} (pinned {first['pinned_at']}, "
                f"{pins.path}). If {namespace} moved its signing on purpose, pass sigstore_identities=[...] "
                f"or delete {pins.path} to pin again on the next load; otherwise do not use this build"
            )
        return KeylessDecision(signer.signer, signer.repository, "pinned", str(pins.path))
    entry = {
        "id": f"sigstore:{signer.repository}",
        "kind": "sigstore",
        "issuer": signer.issuer,
        "identity": signer.repository,
        "source": "metadata.json.sigstore",
        "pinned_at": _now(),
    }

    def pin(data: dict) -> None:
        if entry["id"] not in {k["id"] for k in data["keys"]}:
            data["keys"].append(entry)

    pins.update(pin)
    return KeylessDecision(signer.signer, signer.repository, "first use", str(pins.path))
