"""bench/run_gpu.sh's guard (tests/cuda/check_paths.py) on the built variant: every group of the newest paths
passes against float64 in its child process, so the guard switches nothing off."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

VARIANT_DIR = os.environ.get("FUSED_MLP_VARIANT_DIR")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not VARIANT_DIR, reason="FUSED_MLP_VARIANT_DIR is not set")]


def test_every_new_path_passes_its_check():
    script = Path(__file__).with_name("check_paths.py")
    env = {k: v for k, v in os.environ.items() if k != "FUSED_MLP_CUDA_DISABLE"}
    run = subprocess.run([sys.executable, script, "--variant-dir", VARIANT_DIR], capture_output=True, text=True,
                         env=env, check=False, timeout=300)  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.splitlines()[-1] == "FUSED_MLP_CUDA_DISABLE=", run.stdout[-2000:]
