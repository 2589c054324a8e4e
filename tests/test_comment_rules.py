"""Comments and docstrings under kernel_src/ and registry/ say why, not when or how fast (issue 42): no
session numbers, UTC times, dates, µs figures or pointers to dated result folders. A number that decided
something lives in bench/BENCHMARKS.md, and the comment points there. Reads the files; nothing is imported.
"""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TREES = ("kernel_src", "registry")
C_SUFFIXES = {".cu", ".cuh", ".h", ".hpp", ".cpp", ".c"}

FORBIDDEN = {
    "session number": re.compile(r"\bsession \d+", re.IGNORECASE),
    "UTC time": re.compile(r"\b\d{1,2}:\d{2}(:\d{2})? ?UTC\b"),
    "date": re.compile(r"\b20\d\d-\d\d-\d\d\b"),
    "µs figure": re.compile(r"\d(\.\d+)?\s?(µs|us)\b"),
    "pointer to a diary (RESULTS.md, bench/results/)": re.compile(r"RESULTS\.md|bench/results/"),
}
_C_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)


def _python_text(source: str) -> list[tuple[int, str]]:
    """(line, text) of every comment and string literal (docstrings included) of a Python file."""
    out = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type in (tokenize.COMMENT, tokenize.STRING):
            out.append((tok.start[0], tok.string))
    return out


def _c_text(source: str) -> list[tuple[int, str]]:
    """(line, text) of every comment of a C/C++/CUDA file."""
    return [(source.count("\n", 0, m.start()) + 1, m.group()) for m in _C_COMMENT.finditer(source)]


def violations(path: Path, root: Path = ROOT) -> list[str]:
    """'file:line: what: text' for each forbidden pattern in `path`'s comments (and, in Python, strings)."""
    source = path.read_text(encoding="utf-8")
    pieces = _python_text(source) if path.suffix == ".py" else _c_text(source)
    found = []
    for line, text in pieces:
        for what, pattern in FORBIDDEN.items():
            for m in pattern.finditer(text):
                at = line + text.count("\n", 0, m.start())
                found.append(f"{path.relative_to(root)}:{at}: {what}: {m.group()!r}")
    return found


def _files() -> list[Path]:
    return sorted(
        p
        for tree in TREES
        for p in (ROOT / tree).rglob("*")
        if p.is_file() and (p.suffix == ".py" or p.suffix in C_SUFFIXES)
    )


def test_comments_say_why_not_when_or_how_fast():
    files = _files()
    assert any(p.suffix == ".cu" for p in files) and any(p.suffix == ".py" for p in files)
    found = [v for p in files for v in violations(p)]
    assert not found, "say why and point to bench/BENCHMARKS.md instead:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("suffix", "source", "what"),
    [
        (".py", "x = 1  # wall 13.7 µs vs 28.8\n", "µs figure"),
        (".py", '"""Measured in session 35."""\n', "session number"),
        (".py", "# sweep of 2026-12-03 20:54 UTC\n", "UTC time"),
        (".py", "# sweep of 2026-12-03\n", "date"),
        (".cu", "int x;  // about 6 us of work\n", "µs figure"),
        (".cuh", "/* see bench/RESULTS.md */\nint y;\n", "pointer to a diary (RESULTS.md, bench/results/)"),
    ],
)
def test_the_rule_catches_each_pattern(tmp_path, suffix, source, what):
    path = tmp_path / f"probe{suffix}"
    path.write_text(source, encoding="utf-8")
    assert any(f": {what}: " in v for v in violations(path, root=tmp_path))


def test_code_is_not_a_comment():
    """Code that formats a time or a unit is not a comment about one."""
    source = 'fmt = "%Y-%m-%d %H:%M UTC"\nus = f"{t:.1f} µs"\nx = 2026 - 12  # why: the year\n'
    assert not [v for line, text in _python_text(source) for v in FORBIDDEN if FORBIDDEN[v].search(text)]
