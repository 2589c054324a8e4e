"""AOT cubins: compile_all builds cubins + metadata for an arch on a CPU-only machine, and the index the
launcher reads finds every spec it wrote; a Triton version mismatch is refused."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import triton
from fused_mlp.arch import parse_arch
from fused_mlp.triton import aot, aot_build

KERNEL_SRC = Path(__file__).resolve().parents[2] / "kernel_src"


def _compile_in_subprocess(out_dir: Path, arch: str, kernels: list[str]) -> list[str]:
    """compile_all needs real @triton.jit kernels, so it runs without TRITON_INTERPRET."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(out_dir.parent / "triton-cache")
    code = (
        "import json, sys; from pathlib import Path; from fused_mlp.triton import aot_build; "
        f"print(json.dumps([str(p) for p in aot_build.compile_all(Path({str(out_dir)!r}), {arch!r}, "
        f"kernels={kernels!r}, dtypes=['fp16'], jobs=2)]))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        cwd=KERNEL_SRC,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("arch", ("sm_90a", "sm_80"))
def test_compile_all_writes_indexed_cubins(tmp_path, arch):
    out = tmp_path / "cubins"
    written = _compile_in_subprocess(out, arch, ["act_and_mul_kernel"])
    wanted = [s for s in aot_build.shipped_specs(arch, ["fp16"]) if s.kernel == "act_and_mul_kernel"]
    assert len(written) == 2 * len(wanted)
    assert all(Path(p).parent == out / triton.__version__ / arch for p in written)
    cubin = next(Path(p) for p in written if p.endswith(".cubin"))
    assert cubin.read_bytes()[:4] == b"\x7fELF"
    meta = json.loads(cubin.with_suffix(".json").read_text())
    assert (
        meta["target"]["arch"] == parse_arch(arch).number
        and meta["fused_mlp_spec"]["kernel"] == "act_and_mul_kernel"
    )
    # launchers outside Python read the family's params from here (docs/CONTRACTS.md "Kernel families")
    assert meta["fused_mlp_spec"]["params"] == [
        list(p) for p in aot_build.kernel_defs()["act_and_mul_kernel"].params
    ]
    # no path of the build machine in what ships (reproducible digests across machines)
    assert all("/" not in path for _, path in meta["extern_libs"]) and str(tmp_path) not in json.dumps(meta)
    index = aot.load_index(out, triton.__version__, arch)
    assert set(index) == {s.key() for s in wanted}
    assert aot.load_index(out, "0.0.0", arch) == {}


def test_compile_all_refuses_other_triton_version(tmp_path):
    with pytest.raises(RuntimeError, match="triton==9.9.9"):
        aot_build.compile_all(tmp_path, "sm_90a", "9.9.9")


def test_compile_all_refuses_unknown_arch(tmp_path):
    with pytest.raises(ValueError, match="sm_75"):
        aot_build.compile_all(tmp_path, "sm_75")


def test_hopper_specs_ship_for_sm_90a_only():
    """sm_90a ships the Hopper kernels (forward, gated training forward, backward roles) beside the portable
    ones; archs without Hopper tables ship only the portable kernels."""
    kernels = {s.kernel for s in aot_build.shipped_specs("sm_90a", ["bf16"])}
    assert {"tma_gemm_kernel", "tma_gate_up_kernel", "linear_kernel", "gate_up_kernel"} <= kernels
    for arch in ("sm_80", "sm_89", "sm_100a", "sm_120"):
        assert not any(s.kernel.startswith("tma_") for s in aot_build.shipped_specs(arch, ["bf16"])), arch
