"""Per-file sha256 digests of a build variant, by the rules `kernels` uses (docs/HUB_PROTOCOL.md §7).

Pure functions over a directory: the builder writes the result into `metadata.json["digest"]`, the
loader re-hashes a downloaded variant and compares. Values are standard padded base64 of the raw
sha256, paths are `/`-separated and relative to the variant directory.
"""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Collection
from pathlib import Path

ALGORITHM = "sha256"
# Top-level files that carry or sign the digest itself, so they cannot be part of it.
EXCLUDED_TOP_LEVEL = frozenset({"metadata.json", "metadata.json.sigstore", "metadata.json.sig"})


def is_digested(relpath: str) -> bool:
    """True when a variant-relative `/` path takes part in the digest (bytecode and signatures do not)."""
    parts = relpath.split("/")
    if relpath in EXCLUDED_TOP_LEVEL or "__pycache__" in parts[:-1]:
        return False
    return not parts[-1].endswith(".pyc")


def file_digest(path: Path) -> str:
    """Base64 (standard, padded) of the sha256 of one file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return base64.b64encode(h.digest()).decode("ascii")


def hash_variant(variant_dir: Path) -> dict[str, str]:
    """Map every digested file under `variant_dir` (symlinks followed, hidden files included) to its digest."""
    root = Path(variant_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"variant directory {root} does not exist or is not a directory")
    files: dict[str, str] = {}
    for dirpath, _dirnames, filenames in os.walk(root, followlinks=True):
        for name in filenames:
            path = Path(dirpath) / name
            rel = path.relative_to(root).as_posix()
            if path.is_file() and is_digested(rel):
                files[rel] = file_digest(path)
    return dict(sorted(files.items()))


def mismatches(variant_dir: Path, metadata: dict, absent_ok: Collection[str] = ()) -> dict[str, str]:
    """relpath -> what is wrong with it ("missing ...", "extra ...", "changed ...") under `variant_dir`.

    `absent_ok`: digest paths the caller left out on purpose (e.g. cubins of other GPU archs): their
    absence is fine, but when present they must match like every other file. A problem with the digest
    table itself is keyed "metadata.json".
    """
    digest = metadata.get("digest")
    if not isinstance(digest, dict) or not isinstance(digest.get("files"), dict):
        return {
            "metadata.json": "metadata.json has no digest.files table: rebuild the variant with `kernel-hub build`"
        }
    if digest.get("algorithm") != ALGORITHM:
        return {
            "metadata.json": f"digest algorithm {digest.get('algorithm')!r} is not supported (expected {ALGORITHM!r})"
        }
    expected: dict[str, str] = digest["files"]
    actual = hash_variant(variant_dir)
    out = {
        p: f"missing file {p} (listed in the digest)"
        for p in sorted(expected.keys() - actual.keys() - set(absent_ok))
    }
    out |= {p: f"extra file {p} (not in the digest)" for p in sorted(actual.keys() - expected.keys())}
    out |= {
        p: f"changed file {p}: sha256 {actual[p]} != expected {expected[p]}"
        for p in sorted(expected.keys() & actual.keys())
        if expected[p] != actual[p]
    }
    return out


def verify_digests(variant_dir: Path, metadata: dict, absent_ok: Collection[str] = ()) -> list[str]:
    """Compare the files on disk with `metadata["digest"]`; return one line per problem ([] = all match)."""
    return list(mismatches(variant_dir, metadata, absent_ok).values())
