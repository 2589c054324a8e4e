"""Compatibility matrix: which variant of a kernel version each promised environment gets, and proof.

Pure parts (`config`, `cells`, `records`, `render`, `plan`) turn build/matrix.toml + variant metadata +
recorded checks into tables; `store` reads/writes the hub and `probe` runs a real check on this machine.
The hub's kernel page shows `MatrixSection` (`render_html(matrix_from_files(...))`), wired by `kernel-hub serve`.
"""

from registry.spec.names import COMPAT_BRANCH

from .cells import Cell, Matrix, build_matrix
from .config import MatrixConfig, MatrixEnv, load_config, parse_config
from .files import MatrixSection, matrix_from_files
from .records import CheckRecord
from .render import render_html, render_html_page, render_json, render_markdown

__all__ = [
    "COMPAT_BRANCH",
    "Cell",
    "CheckRecord",
    "Matrix",
    "MatrixConfig",
    "MatrixEnv",
    "MatrixSection",
    "build_matrix",
    "load_config",
    "matrix_from_files",
    "parse_config",
    "render_html",
    "render_html_page",
    "render_json",
    "render_markdown",
]
