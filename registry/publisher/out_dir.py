"""Which `--out` a build may replace: never the sources, never tracked files, only what a build wrote.

`kernel-hub build` replaces its output directory whole. A mistyped `--out` (say `kernel_src`, which an
old error message even suggested) must not delete anything but an earlier build: the builder leaves
`MARKER` in every dist it writes and replaces only a missing or empty directory, or one with the marker.
The publisher never uploads the marker.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from .errors import BuildError

MARKER = ".kernel-hub-dist"


def marker_text(source: Path) -> str:
    """What the marker holds: only for people (the builder checks that it exists)."""
    return json.dumps({"written-by": "kernel-hub build", "source": source.name}) + "\n"


def _inside(a: Path, b: Path) -> bool:
    return a == b or b in a.parents


def tracked_files(path: Path, limit: int = 3) -> list[str]:
    """Up to `limit` files git tracks at or under `path` ([] outside a git checkout)."""
    probe = path if path.is_dir() else path.parent
    while not probe.exists():
        probe = probe.parent
    try:
        proc = subprocess.run(
            ["git", "-C", str(probe), "ls-files", "-z", "--full-name", "--", str(path)],
            capture_output=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):  # no git, or not a checkout
        return []
    return [f for f in proc.stdout.decode(errors="replace").split("\0") if f][:limit]


def _repo_top(path: Path) -> Path | None:
    """The root of the git checkout `path` is or would be in (None: not in one)."""
    probe = path
    while not probe.exists():
        probe = probe.parent
    try:
        top = subprocess.run(
            ["git", "-C", str(probe), "rev-parse", "--show-toplevel"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return Path(top).resolve() if top else None


def _unmarked_build(path: Path) -> bool:
    """A dist from before the marker: nothing but `build/<variant>/metadata.json` folders at its top."""
    build = path / "build"
    variants = [v for v in build.iterdir() if v.is_dir()] if build.is_dir() else []
    return (
        [e.name for e in path.iterdir()] == ["build"]
        and bool(variants)
        and all((v / "metadata.json").is_file() for v in variants)
    )


def check_out_dir(out: Path, source: Path) -> None:
    """Raise BuildError unless the build may replace `out` (both paths resolved). See the module docstring."""
    if _inside(out, source) or _inside(source, out):
        where = "is" if out == source else "lies inside" if _inside(out, source) else "contains"
        raise BuildError(f"--out {out} {where} --source {source}; choose another --out, e.g. dist/fused-mlp")
    top = _repo_top(out)
    if top == out:
        raise BuildError(
            f"--out {out} is the root of a git checkout; choose another --out, e.g. dist/fused-mlp"
        )
    if top is not None:
        # The top-level folder of the checkout that `out` is or lies in must hold no tracked file.
        first = top / out.relative_to(top).parts[0]
        tracked = tracked_files(first)
        if tracked:
            raise BuildError(
                f"--out {out} {'is' if first == out else 'lies in'} {first}, which holds files the git "
                f"repository tracks ({', '.join(tracked)}); choose an untracked folder, e.g. dist/fused-mlp"
            )
    if out.is_dir() and any(out.iterdir()) and not (out / MARKER).is_file() and not _unmarked_build(out):
        raise BuildError(
            f"--out {out} exists and was not written by `kernel-hub build` (no {MARKER} in it), so it is not "
            "replaced; choose another --out, or remove it yourself if it is an old build"
        )
    if out.exists() and not out.is_dir():
        raise BuildError(f"--out {out} is a file; choose a directory, e.g. dist/fused-mlp")
