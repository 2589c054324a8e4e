"""`kernel-hub demo`: the README's main job, end to end in a subprocess on this CPU-only machine."""

from __future__ import annotations

import os
import subprocess
import sys

from loader_paths import REPO_ROOT


def test_demo_runs_the_whole_path_and_shows_the_fallback(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "KERNELS_"))}
    env["HF_HOME"] = str(tmp_path / "hf-home")
    env["KERNEL_HUB_KEY"] = str(tmp_path / "unused.pem")  # the demo passes its own key; never touch ~/.config
    cmd = [sys.executable, "-m", "registry.cli", "demo", "--data", str(tmp_path / "hub"), "--no-aot"]
    proc = subprocess.run(
        cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "v1 -> " in out and "variants: torch-cpu, torch-cuda, torch-universal" in out
    assert "  path:   fallback-compile (reference from torch-cpu" in out
    assert "  reason: no CUDA device" in out
    assert "  check:  passed: 20/20 comparisons within tolerance on cpu" in out
    table = out.split("== timing on cpu")[1].splitlines()
    assert table[1].split() == [
        "op",
        "shape",
        "(M",
        "x",
        "K",
        "->",
        "N)",
        "eager",
        "ms",
        "loaded",
        "ms",
        "speedup",
    ]
    assert len([line for line in table if line.strip().startswith(("mlp", "gated_mlp"))]) == 3
    assert not (tmp_path / "unused.pem").exists()
    # progress as plain lines on stderr while it builds and publishes (issue #14)
    assert "[torch-cpu] built _fused_mlp_torch_cpu_" in proc.stderr
    assert "uploading " in proc.stderr and " files of " in proc.stderr
    # ... and for load and check: which commit, why the fallback, what is checked
    assert " v1 -> commit " in proc.stderr and "variants to try: " in proc.stderr
    assert "no kernel variant used (no CUDA device); fallback=compile" in proc.stderr
    assert "fallback-compile (reference from torch-cpu): checking torch.compile against eager" in proc.stderr
