"""Builds kernel-hub did not make, published as they are: kernel-builder's `build/<variant>/` with its metadata.json.

kernel-builder writes what `kernels` needs (id, name, version, license, python-depends, backend) but no file
digests and no API record. Publishing adds both to metadata.json before signing it, so the signature covers
every file; the files themselves are published unchanged, and stock `kernels` loads them as before.
"""

from __future__ import annotations

import ast
from dataclasses import replace
from pathlib import Path

from registry.spec import digest
from registry.spec.names import python_name
from registry.spec.variant import VariantMetadata

KIND = "kernel-builder"


def is_foreign(meta: VariantMetadata) -> bool:
    """Whether `meta` was written by another builder (no digest table: kernel-hub always writes one)."""
    return not meta.digest


def package_all(variant_dir: Path, name: str) -> list[str]:
    """The `__all__` of the variant's package, read from its source (nothing is imported); [] when it has none."""
    init = Path(variant_dir) / python_name(name) / "__init__.py"
    try:
        tree = ast.parse(init.read_text())
    except (OSError, SyntaxError, UnicodeDecodeError):
        return []
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__all__" for t in node.targets):
            try:
                return sorted(str(n) for n in ast.literal_eval(node.value))
            except ValueError:
                return []
    return []


def adopt(variant_dir: Path, meta: VariantMetadata) -> VariantMetadata:
    """`meta` with the digests of the files as they are, an API record and a note saying where it came from."""
    notes = ["built by kernel-builder; kernel-hub added the file digests and the API record when publishing"]
    return replace(
        meta,
        api=meta.api or {"__all__": package_all(variant_dir, meta.name), "signatures": {}},
        build=meta.build or {"variant": Path(variant_dir).name, "kind": KIND, "notes": notes},
        digest={"algorithm": digest.ALGORITHM, "files": digest.hash_variant(variant_dir)},
    )
