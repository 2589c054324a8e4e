"""`kernel-hub bench` on this CPU machine (`--backend cpu`): it times the CPU builds against eager, records the
result on the repo's `compat` branch, and then `kernel-hub matrix`, the hub page and get_kernel's order use it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request

from loader_paths import NAMESPACE, REPO_ROOT

from registry.cli import main

LOAD = """
import json, registry
m = registry.get_kernel({repo!r}, version=1, backend="cpu", fallback="eager", check=None, speed_check=None)
print(json.dumps(m.__kernel_info__))
"""


def test_bench_records_speed_that_the_matrix_the_page_and_the_loader_use(
    hub, hub_env, publisher, run_python, capsys, tmp_path
):
    publisher.publish("benched", publisher.build("benched", variants=["torch-cpu", "torch-universal"]))
    repo = f"{NAMESPACE}/benched"
    out = tmp_path / "speed.json"
    env = {
        **os.environ,
        **hub_env,
        "TRITON_INTERPRET": "0",  # the CPU builds' ops are then the eager reference (no interpreter)
        "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(REPO_ROOT / "kernel_src")]),
    }
    args = [
        "bench",
        repo,
        "--version",
        "1",
        "--backend",
        "cpu",
        "--no-compile",
        "--rounds",
        "3",
        "--preset",
        "gpt2",
        "--preset",
        "gated_mlp:96x160:silu",  # a shape no preset has
    ]
    proc = subprocess.run(
        [sys.executable, "-m", "registry.cli", *args, "--out", str(out), "--token", publisher.token],
        env=env,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("| workload | torch-cpu | torch-universal | eager |"), proc.stdout
    assert "get_kernel here would serve torch-" in proc.stderr and "recorded " in proc.stderr
    record = json.loads(out.read_text())
    assert (record["kind"], record["device"], record["repo"]) == ("speed", "cpu", repo)
    assert {(t["implementation"], t["us"] is not None) for t in record["timings"]} == {
        ("torch-cpu", True),
        ("torch-universal", True),
        ("eager", True),
    }

    workloads = {t["workload"] for t in record["timings"]}
    assert {"gpt2 M=1", "gpt2 M=16", "gated_mlp:96x160:silu M=16"} <= workloads  # the presets' rows

    assert main(["matrix", repo, "--version", "1", "--format", "json"]) in (
        0,
        1,
    )  # 1: no GPU variant promised
    matrix = json.loads(capsys.readouterr().out)
    assert [s["fingerprint"] for s in matrix["speed"]] == [record["fingerprint"]]

    page = urllib.request.urlopen(f"{hub.url}/kernels/{repo}").read().decode()
    assert '<section class="kh-speed">' in page and "mlp 3xLinear(512)+ReLU M=128" in page
    assert "gpt2 M=16" in page and "gated_mlp:96x160:silu M=1" in page

    info = run_python(LOAD.format(repo=repo), hub_env)
    assert info["order"]["by"] == "recorded speed-up over eager on this GPU arch"
    assert set(info["order"]["recorded_speedup"]) == {"torch-cpu", "torch-universal"}


def test_a_typo_in_a_shape_fails_in_one_line_before_anything_loads(capsys):
    # "swiglu" names the block, not the activation (silu): no hub is asked, no timing is recorded
    code = main(
        ["bench", f"{NAMESPACE}/benched", "--version", "1", "--preset", "gated_mlp:4096x14336:swiglu"]
    )
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and "unexpected" not in err, err
    assert "activation 'swiglu' is not one of none, relu, gelu, gelu_tanh, silu" in err, err
    assert main(["bench", f"{NAMESPACE}/benched", "--version", "1", "--preset", "llama-8b"]) == 2
    assert "unknown shape preset 'llama-8b'; use one of llama-3-8b" in capsys.readouterr().err
