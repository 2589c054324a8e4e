"""On a CUDA device (`pytest -m gpu`): get_kernel picks torch-cuda, passes its check, and its first result
in a fresh process needs no Triton JIT; time_to_first_result.py (next to this file)
checks exactly these promises."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from loader_paths import REPO_ROOT


@pytest.mark.gpu
def test_aot_kernel_is_chosen_checked_and_runs_without_jit(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("time_to_first_result.py")), "--out", str(tmp_path)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
