"""Both kinds of hub the real-Hub tests run against: ours (`hub`) and one without our extensions
(`plain_hub`, `serve --no-extensions`, as the Hugging Face Hub). A plain module, as loader_paths.py."""

from __future__ import annotations

import uuid
from pathlib import Path

from registry.publisher.publish import publish

HUB_KINDS = ["hub", "plain_hub"]


def publish_fresh(hub, dist: Path, key_path: Path, version: int = 1) -> tuple[str, str, str]:
    """`dist` as `version` of a new trusted org's `fused-mlp` on `hub`: (repo id, commit, write token)."""
    org = f"k{uuid.uuid4().hex[:8]}"
    token = hub.token(f"{org}-user", write=[org])
    hub.org(org, trusted=True, members=(f"{org}-user",))
    repo = f"{org}/fused-mlp"
    result = publish(repo, dist, version, endpoint=hub.url, token=token, key_path=key_path)
    return repo, result.commit, token


def add_key_on_purpose(hub, namespace: str, key_path: Path) -> Path:
    """Make a key at `key_path` and register it for `namespace` as the hub's admin does (`kernel-hub key add`):
    the only way besides a signed rotation that a namespace gets a second key (issue 43)."""
    from registry.spec.signing import load_or_create_key, public_key_b64

    key, _ = load_or_create_key(key_path)
    pub = key_path.with_suffix(".pub")
    pub.write_text(public_key_b64(key) + "\n")
    hub._admin("key", "add", namespace, "--public-key", str(pub))
    return key_path


def republish_with_new_key(hub, repo: str, dist: Path, token: str, key_path: Path, version: int = 1):
    """Move `version` of `repo` to `dist` signed by a second key added on purpose (another tree, another
    signer): the publish a pinned consumer must notice. Returns publish's result."""
    key = add_key_on_purpose(hub, repo.split("/")[0], key_path)
    return publish(repo, dist, version, endpoint=hub.url, token=token, key_path=key, update=True)
