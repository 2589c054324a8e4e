"""The matrix of one version from raw repo files, for callers that hold the files themselves (the hub).

Pure: `read` returns a file's bytes at the version commit, `compat` maps `compat`-branch paths to
bytes. Records that do not parse are skipped here (a web page must render), and named in the result.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping

from .cells import Matrix, build_matrix
from .config import MatrixConfig, load_config
from .records import RecordError, commit_dir, parse_record


def matrix_from_files(
    *,
    repo: str,
    version: int,
    commit: str,
    paths: Iterable[str],
    read: Callable[[str], bytes],
    compat: Mapping[str, bytes] | None = None,
    config: MatrixConfig | None = None,
) -> tuple[Matrix, list[str]]:
    """(matrix, warnings): variants from `build/<v>/metadata.json` among `paths`, records under checks/<commit>/."""
    warnings: list[str] = []
    variants = {}
    for path in sorted(paths):
        parts = path.split("/")
        if len(parts) == 3 and parts[0] == "build" and parts[2] == "metadata.json":
            try:
                variants[parts[1]] = json.loads(read(path))
            except ValueError as e:
                warnings.append(f"{path}: not JSON ({e})")
    records = []
    prefix = commit_dir(commit) + "/"
    for path, data in sorted((compat or {}).items()):
        if path.startswith(prefix) and path.endswith(".json"):
            try:
                records.append(parse_record(json.loads(data)))
            except (ValueError, RecordError) as e:
                warnings.append(f"compat:{path}: {e}")
    matrix = build_matrix(
        config or load_config(), repo=repo, version=version, commit=commit, variants=variants, records=records
    )
    return matrix, warnings
