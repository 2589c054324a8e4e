"""`kernel-hub init NAME`: a new kernel package that builds, publishes, loads and passes the check as it stands.

It is the files of `template/` with the names filled in: a Triton op and its launcher (AOT cubin or JIT), the
op's eager reference with the check's inputs, `build.toml`, a test and a README. Nothing is overwritten.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from registry.spec.names import python_name

from .aot import installed_triton_version
from .errors import BuildError

TEMPLATE = Path(__file__).parent / "template"
_NAME = re.compile(r"[a-z][a-z0-9]*(-[a-z0-9]+)*")
_FALLBACK_TRITON = "3.6.0"


def triton_version(python: str = sys.executable) -> str:
    """The Triton the build will compile cubins with (build.toml's `versions`), or a default when none is here."""
    return installed_triton_version(python) or _FALLBACK_TRITON


def rendered(name: str, triton: str) -> dict[str, str]:
    """Relative path -> text of every file of the new package `name`."""
    py = python_name(name)
    files = {}
    for path in sorted(TEMPLATE.rglob("*.tmpl")):
        rel = path.relative_to(TEMPLATE).as_posix().removesuffix(".tmpl")
        rel = re.sub(r"(^|/)PKG(/|$)", rf"\g<1>{py}\g<2>", rel).replace("__PY__", py)
        text = path.read_text()
        for key, value in (("__NAME__", name), ("__PY__", py), ("__TRITON__", triton)):
            text = text.replace(key, value)
        files[rel] = text
    return files


def init_package(name: str, parent: Path, triton: str | None = None) -> Path:
    """Write the package `name` into `parent/name/`; returns that folder. Refuses a bad name or a used folder."""
    if not _NAME.fullmatch(name):
        raise BuildError(
            f"kernel name {name!r}: use lower-case letters, digits and single '-' between words, e.g. 'my-kernel'"
        )
    dest = Path(parent) / name
    if dest.exists() and any(dest.iterdir()):
        raise BuildError(
            f"{dest} exists and is not empty: choose another name or folder (nothing was written)"
        )
    for rel, text in rendered(name, triton or triton_version()).items():
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    return dest
