"""Run the ABI and arch checks on the extension inside every wheel of a folder (cibuildwheel's repair step).

python build/cuda/check_wheel.py WHEEL_DIR  ->  exit 1 and the failed rules when any wheel breaks one.
"""

from __future__ import annotations

import sys
import tempfile
import tomllib
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import abi_check
import build_variant


def check_wheel(wheel: Path) -> list[abi_check.CheckResult]:
    plan = build_variant.cuda_plan(tomllib.loads((HERE.parent / "matrix.toml").read_text()))
    tools = build_variant.find_toolchain(sys.executable, plan.cuda.split(".")[0])
    with tempfile.TemporaryDirectory() as tmp:
        so = Path(tmp) / "_C.abi3.so"
        with zipfile.ZipFile(wheel) as zf:
            so.write_bytes(zf.read(build_variant.SO_IN_WHEEL))
        return abi_check.run_checks(so, tools.cuobjdump, tools.python, list(plan.archs), list(plan.ptx))


def main(argv: list[str]) -> int:
    failed = 0
    for wheel in sorted(Path(argv[0]).glob("*.whl")):
        for check in check_wheel(wheel):
            print(f"{wheel.name}: {'ok  ' if check.ok else 'FAIL'} {check.name}: {check.detail}")
            failed += not check.ok
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
