"""The CUDA variant built the way `kernel-hub build` builds it, on this CPU machine: the path table's Triton
kernels compiled ahead of time and embedded (bf16 only here, to stay fast), nvcc 13 for every matrix arch
against CUDA torch headers, abi3 wheel repaired to manylinux_2_28, ABI and arch checks; then the .so loads
into the CUDA torch, under the namespace baked in from _build_info.py, reports its embedded cubins and path
table, and a call says it needs a CUDA device. ~2 min of compile on 2 cores (longer on a busy machine)."""

import json
import os
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "build" / "cuda"))
import build_variant
import embed_cubins
import host_probe

NAMESPACE = "fused_mlp_cibuild0"
WHY = build_variant.cuda_unavailable_reason(os.environ.get("KERNEL_HUB_CUDA_PYTHON"))
pytestmark = pytest.mark.skipif(WHY is not None, reason=f"{WHY} (`make test` provides both)")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(staged package, returned .so path, out dir) of one full build under NAMESPACE."""
    root = tmp_path_factory.mktemp("cuda-variant")
    package = build_variant.stage_dev_package(REPO / "kernel_src" / "fused_mlp", root / "stage")
    info = package / "_build_info.py"
    info.write_text(
        info.read_text().replace('OPS_NAMESPACE = "fused_mlp_dev"', f'OPS_NAMESPACE = "{NAMESPACE}"')
    )
    matrix = tomllib.loads((REPO / "build" / "matrix.toml").read_text())
    # One kernel's cubins compiled beforehand, as the Triton variant of the same build would have them:
    # the recipe must reuse those and compile the rest.
    pre = {"sm_90a": [["act_and_mul_kernel", "act_and_mul"]]}
    embed_cubins.aot_rows(package, sys.executable, pre, root / "pre", dtypes=("bf16",))
    so = build_variant.build_cuda_variant(
        package,
        root / "out",
        matrix,
        os.environ.get("KERNEL_HUB_CUDA_PYTHON"),
        triton=build_variant.TritonAot(python=sys.executable, reuse=root / "pre", dtypes=("bf16",)),
    )
    return package, so, root / "out"


def test_extension_is_placed_with_passing_checks(built):
    package, so, _ = built
    assert so == package / "cuda" / "_C.abi3.so" and so.stat().st_size > 0
    record = json.loads((package / "cuda" / "build.json").read_text())
    assert record["namespace"] == NAMESPACE and record["torch_target"] == "2.11"
    assert record["archs"] == ["sm_80", "sm_89", "sm_90a", "sm_100a", "sm_120"] and record["ptx"] == [
        "sm_120"
    ]
    names = {c["name"].split()[0] for c in record["checks"]}
    assert {"symbol", "no", "dependencies:", "kernel-abi-check", "archs"} <= names
    assert all(c["ok"] for c in record["checks"]), record["checks"]
    import triton

    embedded = record["triton"]
    assert embedded["version"] == triton.__version__ and embedded["archs"] == ["sm_90a"], embedded
    assert embedded["cubins"] > 0 and embedded["entries"] >= embedded["cubins"], embedded
    assert (
        "compiled sm_90a: gate_up, gemv_gate_up, gemv_linear, linear, tma_gate_up, tma_linear"
        in embedded["note"]
    ), embedded
    assert "reused sm_90a: act_and_mul" in embedded["note"], embedded


def test_wheel_is_abi3_manylinux_2_28_without_bundled_libraries(built):
    _, so, out = built
    (wheel,) = (out / "wheelhouse").glob("*.whl")
    assert "-cp310-abi3-" in wheel.name and "manylinux_2_28_x86_64" in wheel.name, wheel.name
    with zipfile.ZipFile(wheel) as zf:
        libs = [n for n in zf.namelist() if ".libs/" in n]
        assert zf.read(build_variant.SO_IN_WHEEL) == so.read_bytes()
    assert libs == [], f"auditwheel grafted libraries that torch provides: {libs}"


def test_loads_into_cuda_torch_without_gpu_and_refuses_cpu_tensors(built):
    package, _, _ = built
    embedded = json.loads((package / "cuda" / "build.json").read_text())["triton"]
    python = build_variant.find_toolchain(os.environ.get("KERNEL_HUB_CUDA_PYTHON")).python
    code = f"""
import json, torch
import fused_mlp
# The backend choice waits for CUDA's start-up (a CUDA build of torch); reading BACKEND makes it now.
assert not torch.cuda.is_initialized() and "BACKEND" not in vars(fused_mlp)
assert fused_mlp.BACKEND == "reference" and "CUDA device" in fused_mlp.BACKEND_SKIPPED["cuda"], vars(fused_mlp).get("BACKEND_SKIPPED")
from fused_mlp import cuda
from fused_mlp.cuda import _library, ops
ok, why = cuda.available()
assert not ok and "CUDA device" in why, why
ns = _library.load()
assert ns is torch.ops.{NAMESPACE}
for name in ("cuda_linear", "cuda_mlp", "cuda_gated_mlp", "cuda_act_and_mul", "cuda_mlp_backward",
             "cuda_mlp_infer", "cuda_gated_mlp_infer", "cuda_mlp_train", "cuda_gated_mlp_train"):
    assert getattr(ns, name).default._schema.name == "{NAMESPACE}::" + name
from fused_mlp.cuda import _autograd
_autograd.Functions(ns)  # binds every raw entry the eager training path calls
info = json.loads(ns.cuda_build_info(0))
assert info["entries"] == {embedded["entries"]}, info
assert info["triton"] == "{embedded["version"]}" and info["sm"] == 0, info  # no GPU: the default rows
assert info["paths"]["mlp/linear"][0] == [1, "cublaslt", "cublaslt"], info
assert info["paths"]["gated_mlp/gate_up"][-1] == [8192, "split", "split"], info
x = torch.empty(3, 5, 64, device="meta", dtype=torch.bfloat16)
ws = [torch.empty(32, 64, device="meta", dtype=torch.bfloat16), torch.empty(8, 32, device="meta", dtype=torch.bfloat16)]
assert ns.cuda_mlp_infer(x, ws, [], "relu").shape == (3, 5, 8)
wg = torch.empty(48, 64, device="meta", dtype=torch.bfloat16)
y, h, gu = ns.cuda_gated_mlp_train(x, wg, wg, torch.empty(64, 48, device="meta", dtype=torch.bfloat16), "silu")
assert (y.shape, h.shape, gu.shape) == ((3, 5, 64), (3, 5, 48), (2, 15, 48)), (y.shape, h.shape, gu.shape)
try:
    ops.mlp(torch.randn(4, 8), [torch.randn(8, 8)])
except RuntimeError as exc:
    assert "needs a CUDA device" in str(exc), exc
else:
    raise AssertionError("a CPU call succeeded")
print("loaded", torch.__version__)
"""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # the CUDA venv has no numpy
    env["PYTHONPATH"] = str(package.parent)
    proc = subprocess.run(
        [python, "-c", code], capture_output=True, text=True, env=env, timeout=300, check=False
    )
    assert proc.returncode == 0 and "loaded" in proc.stdout, proc.stderr[-3000:]


def test_cibuildwheel_repair_check_passes_on_the_wheel(built):
    import check_wheel

    _, _, out = built
    assert check_wheel.main([str(out / "wheelhouse")]) == 0


def test_launcher_picks_cubins_and_paths_in_cpp(built, tmp_path):
    """The C++ launcher's own choices, host only (tests/cuda/cpp/cubin_selection.cu against this build's
        generated table): the Hopper tile alternative by last-wave fill (128x256 on N=1024, 128x128 on N=768, as
        configs.tma_config), the persistent grid min(SMs, tiles), the (g, u)-storing gate/up cubin for training,
        the path table per M (eager and captured: no row picks tma, see paths.GRAPH_PATHS; the persistent chain per
    op and M), and
        FUSED_MLP_CUDA_DISABLE turning implementations off."""
    _, _, out = built
    probe = host_probe.compile_probe("cubin_selection.cu", out / "work" / "gen" / embed_cubins.GEN_SOURCE,
                                     tmp_path / "probe", NAMESPACE)  # fmt: skip

    def run(**env) -> str:
        return host_probe.run_probe(probe, **env)

    text = run()
    expect = [
        r"tma_linear M=8192 N=1024: tma_gemm_kernel 128x256 programs 132 scratch \d+ pdl 0 store 0",
        r"tma_linear M=8192 N=768: tma_gemm_kernel 128x128 programs 132 ",
        r"tma_gate_up M=8192 N=3072: tma_gate_up_kernel 128x128 programs 132 scratch \d+ pdl 0 store 0",
        r"tma_gate_up M=8192 N=3072: tma_gate_up_kernel 128x128 programs 132 scratch \d+ pdl 0 store 1 up_first 0",
        r"tma_gate_up M=8192 N=3072: tma_gate_up_kernel 128x128 programs 132 scratch \d+ pdl 0 store 0 up_first 1",
        r"tma_gate_up M=1024 N=3072: tma_gate_up_kernel 128x64 programs 132 scratch \d+ pdl 1 store 0",  # its own row up to 1024: PDL
        r"linear M=16 N=1024: linear_kernel 16x16 programs 64 scratch 0 pdl 1",
        r"act_and_mul M=1 N=3145728: act_and_mul_kernel 0x1024 programs 3072 ",
        # Impl codes: 0 triton, 1 cublaslt, 2 split, 3 cuda, 4 tma, 5 persistent, 6 layers
        r"path M=1 captured 0: gate_up 0 linear 0 act_and_mul 0",
        r"path M=257 captured 0: gate_up 4 linear 0 act_and_mul 0",
        r"path M=8192 captured 1: gate_up 4 linear 1 act_and_mul 0",
        r"path M=256 captured 1: gate_up 0 linear 1 act_and_mul 0",
        # the training forward (op gated_mlp_train): split up to 2048 rows, the Hopper kernel beyond
        r"path M=1 captured 0: gate_up 0 linear 0 act_and_mul 0 train gate_up 2",
        r"path M=257 captured 0: gate_up 4 linear 0 act_and_mul 0 train gate_up 2",
        r"path M=8192 captured 1: gate_up 4 linear 1 act_and_mul 0 train gate_up 4",
        # the whole op in the persistent chain kernel (mlp, then the gated training forward): calls one by one up
        # to 64 rows; in a graph the mlp up to 16 rows, the gated MLP at 1 row
        r"path M=64 captured 0: .* chain 5 5",
        r"path M=65 captured 0: .* chain 6 6",
        r"path M=1 captured 1: .* chain 5 5",
        r"path M=16 captured 1: .* chain 5 6",
        r"path M=64 captured 1: .* chain 6 6",
    ]
    for pattern in expect:
        assert re.search(pattern, text), f"{pattern!r} not in:\n{text}"
    off = run(FUSED_MLP_CUDA_DISABLE="tma,triton")
    assert re.search(r"path M=8192 captured 0: gate_up 2 linear 1 act_and_mul 3", off), off
    assert re.search(r"path M=1 captured 1: gate_up 2 linear 1 act_and_mul 3", off), off
    off = run(FUSED_MLP_CUDA_DISABLE="persistent")
    assert re.search(r"path M=1 captured 0: .* chain 6 6", off), off
