"""The matrix of one version from raw repo files, for callers that hold the files themselves (the hub).

Pure: `read` returns a file's bytes at the version commit, `compat` maps `compat`-branch paths to
bytes. Records that do not parse are skipped here (a web page must render), and named in the result.
`MatrixSection` is the block the hub's kernel pages show (the matrix, then the speed chart of the
`kernel-hub bench` records), handed to `create_app(extensions=...)` by `kernel-hub serve`.
"""

from __future__ import annotations

import contextlib
import html
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from registry.client.speed_records import SPEED_DIR, SpeedRecordError, parse_speed_record
from registry.spec.variant import variant_of

from .cells import Matrix, build_matrix
from .config import MatrixConfig, load_config, promised_config
from .records import RecordError, commit_dir, parse_record
from .render import render_html
from .speed_chart import render_speed_html


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
        name = variant_of(path)
        if name is not None:
            try:
                variants[name] = json.loads(read(path))
            except ValueError as e:
                warnings.append(f"{path}: not JSON ({e})")
    records, speed = [], []
    prefix, speed_prefix = commit_dir(commit) + "/", f"{SPEED_DIR}/{commit}/"
    for path, data in sorted((compat or {}).items()):
        if not path.endswith(".json") or not path.startswith((prefix, speed_prefix)):
            continue
        try:
            if path.startswith(prefix):
                records.append(parse_record(json.loads(data)))
            else:
                speed.append(parse_speed_record(json.loads(data)))
        except (ValueError, RecordError, SpeedRecordError) as e:
            warnings.append(f"compat:{path}: {e}")
    matrix = build_matrix(
        config or promised_config(variants) or load_config(),
        repo=repo,
        version=version,
        commit=commit,
        variants=variants,
        records=records,
        speed=speed,
    )
    return matrix, warnings


@dataclass(frozen=True)
class MatrixSection:
    """The compatibility matrix under each version of a hub kernel page (a `registry.hub.pages.PageSection`).

    The matrix file is read at every render, so a page shows why when it is missing or malformed.
    """

    matrix_path: Path | None = None  # None: build/matrix.toml of the server's working directory or a parent
    title: str = "Compatibility matrix"

    def __call__(self, **page) -> str:
        """`page`: the PageSection keywords (repo, version, commit, paths, read, compat), as matrix_from_files takes them."""
        variants = {}
        for path in page["paths"]:
            if variant_of(path) is not None:
                with contextlib.suppress(ValueError, OSError):
                    variants[variant_of(path)] = json.loads(page["read"](path))
        # The version's own promise first; build/matrix.toml only for versions built before builds recorded one.
        config = promised_config(variants) or load_config(self.matrix_path)
        matrix, warnings = matrix_from_files(**page, config=config)
        notes = "".join(f"<li>{html.escape(w)}</li>" for w in warnings)
        return render_html(matrix) + (f"<ul>{notes}</ul>" if notes else "") + render_speed_html(matrix.speed)
