"""Following a publisher's deliberate key rotation: a new key the pinned key signed in is pinned too.

A namespace adds a key on purpose by an endorsement: a current key signs "this new key signs for the
namespace too" (`registry/spec/signing.py`), and the hub keeps that signature beside the new key
(`GET /api/kernel-hub/keys/{ns}`, docs/HUB_PROTOCOL.md §5); versions signed by the new key also ship the
chain as `keys/<id>.endorsement`, for hubs without that route. A loader pinned to the old key accepts the new one
only through a chain of such endorsements that starts at a key it pinned itself; a key a hub admin added
without one, or one any writer registered, stays refused.
"""

from __future__ import annotations

from registry.spec.signing import SignatureError, key_id, verify_endorsement

from .fetch import Hub

MAX_CHAIN = 16  # rotations followed in one load; a longer chain is refused like a missing one


def follow_rotation(
    hub: Hub, namespace: str, kid: str, pinned: list[dict], repo_id: str, commit: str
) -> list[dict] | None:
    """The keys from a pinned key's endorsement to `kid`, oldest first, every signature checked; None: no chain.

    The links come from the hub's key route, and from the version's own `keys/<id>.endorsement` (a hub without
    the route, such as the Hugging Face Hub): either way each is verified here against a pinned key.
    """
    from .repo_keys import RepoKeyFiles
    from .trust import HubKeyRoute  # trust imports this module

    entries = [e for e in HubKeyRoute().entries(hub, namespace) or [] if e.get("endorsed_by")]
    entries += RepoKeyFiles().endorsements(hub, repo_id, commit)
    by_id = {}
    for e in entries:  # a link the hub lists and the same one the repo ships: either serves
        by_id.setdefault(e.get("id"), e)
    trusted = {k["id"]: k["public_key"] for k in pinned if k.get("kind") == "ed25519"}
    chain: list[dict] = []
    current = kid
    while current not in trusted:
        entry = by_id.get(current)
        if entry is None or not entry.get("endorsed_by") or len(chain) >= MAX_CHAIN:
            return None
        chain.append(entry)
        current = entry["endorsed_by"]
    for entry in reversed(chain):  # from the pinned end: each signer is pinned or was just verified
        try:
            if key_id(entry["public_key"]) != entry["id"]:
                return None
            verify_endorsement(
                namespace, entry["public_key"], trusted[entry["endorsed_by"]], entry["endorsement"]
            )
        except (SignatureError, KeyError, TypeError):
            return None
        trusted[entry["id"]] = entry["public_key"]
    return list(reversed(chain))


def pin_rotation(data: dict, chain: list[dict], now: str) -> None:
    """Add the chain's keys to a pin file's `keys`, each naming the key that endorsed it."""
    known = {k["id"] for k in data["keys"]}
    data["keys"] += [
        {
            "id": e["id"],
            "kind": "ed25519",
            "public_key": e["public_key"],
            "source": f"rotation endorsed by key {e['endorsed_by']}",
            "pinned_at": now,
        }
        for e in chain
        if e["id"] not in known
    ]
