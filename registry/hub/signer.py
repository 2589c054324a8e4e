"""Who signed a version, for the pages: the key id in its variants' `metadata.json.sig`, and how that key
stands with the hub's publisher keys of the namespace (registered, added by a rotation, or unknown).

The hub does not verify signatures (the loader does, with keys it pinned: docs/CONTRACTS.md "Trust"); a page
only says which key a version claims and whether the namespace lists it.
"""

from __future__ import annotations

from collections.abc import Callable

from registry.spec.variant import SIGNATURE

from .manifest import Manifest


def signer_of(manifest: Manifest, read: Callable[[str], bytes], keys: list[dict]) -> dict:
    """`{"key_id", "status"}` of the version: the signing key of its variants ("" when unsigned or unreadable)."""
    ids = set()
    for path in sorted(p for p in manifest if p.startswith("build/") and p.endswith("/" + SIGNATURE)):
        if path.count("/") != 2:
            continue
        try:
            lines = read(path).decode("utf-8", errors="replace").strip().splitlines()
        except (KeyError, OSError):
            continue
        if lines:
            ids.add(lines[0].strip()[:32])
    if not ids:
        return {"key_id": "", "status": "unsigned"}
    by_id = {k["id"]: k for k in keys}
    kid = ", ".join(sorted(ids))
    if len(ids) > 1:
        return {"key_id": kid, "status": "several keys"}
    entry = by_id.get(kid)
    if entry is None:
        return {"key_id": kid, "status": "not a key of this namespace"}
    if entry.get("endorsed_by"):
        return {"key_id": kid, "status": f"rotation endorsed by {entry['endorsed_by']}"}
    return {"key_id": kid, "status": "registered"}
