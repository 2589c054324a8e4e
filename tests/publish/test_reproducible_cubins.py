"""Bit-identical AOT cubins: the same specs compiled twice, in fresh processes that differ in everything a
build may differ in (source path, temp dir, Triton cache, environment), give the same bytes.

sm_100a is the telling arch: Triton 3.6 compiles it with its own ptxas-blackwell, whose register allocation
followed the heap layout (6 of these 10 cubins differed between two builds before `ptxas_pin`, 2026-12-03).
Whole builds are compared too (every variant's metadata.json, so every digest), narrowed to sm_100a's
elementwise kernel to stay fast.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from fused_mlp.triton import aot_build, ptxas_pin
from fused_mlp.triton.configs import LINEAR, table_rows

ROOT = Path(__file__).resolve().parents[2]
ARCH = "sm_100a"


def _telling_specs() -> list:
    """The bf16 linear_kernel specs of sm_100a's second table row (the 64x64x64 tile that showed it)."""
    bound = table_rows(LINEAR, ARCH)[1][0]
    rows = aot_build.shipped_rows(ARCH, ("bf16",))
    return list(dict.fromkeys(r.spec for r in rows if r.role == "linear" and r.max_rows == bound))


def _compile(where: Path, specs: list) -> dict[str, bytes]:
    source = where / "src" / ("x" * len(where.name)) / "fused_mlp"  # a source path of another length
    shutil.copytree(ROOT / "kernel_src" / "fused_mlp", source, ignore=shutil.ignore_patterns("__pycache__"))
    (where / "tmp").mkdir()
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env |= {
        "TMPDIR": str(where / "tmp"),
        "TRITON_CACHE_DIR": str(where / "cache"),
        "PAD": "p" * len(str(where)),
    }
    out = where / "cubins"
    code = (
        "import sys; from pathlib import Path; from fused_mlp.triton.aot_build import compile_specs; "
        "from fused_mlp.triton.specs import AotSpec; "
        f"compile_specs([AotSpec(*s) for s in {[tuple(vars(s).values()) for s in specs]!r}], {ARCH!r}, "
        f"Path({str(out)!r}), jobs=2)"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=source.parent, env=env, capture_output=True,
                          text=True, timeout=600, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {p.name: p.read_bytes() for p in sorted(out.iterdir())}


def test_two_compiles_of_sm_100a_give_the_same_bytes(tmp_path):
    specs = _telling_specs()
    assert len(specs) >= 4, specs
    first = _compile(tmp_path / "a", specs)
    second = _compile(tmp_path / "build-two", specs)
    assert len(first) == 2 * len(specs)  # a .cubin and a .json each
    differ = sorted(name for name in first if first[name] != second.get(name))
    assert not differ, f"two compiles of the same specs differ: {differ}"
    meta = json.loads(next(v for k, v in first.items() if k.endswith(".json")))
    assert meta["target"]["arch"] == 100


def test_ptxas_arguments_are_pinned():
    argv, src, out = ptxas_pin.pinned_argv(
        ["-lineinfo", "-v", "--gpu-name=sm_100a", "/tmp/tmpab12.ptx", "-o", "/tmp/tmpab12.ptx.o"]
    )
    assert (src, out) == ("/tmp/tmpab12.ptx", "/tmp/tmpab12.ptx.o")
    assert argv == ["ptxas", "-lineinfo", "-v", "--gpu-name=sm_100a", "kernel.ptx", "-o", "kernel.cubin"]
    with pytest.raises(ValueError, match=r"one \.ptx input"):
        ptxas_pin.pinned_argv(["--gpu-name=sm_100a", "a.ptx", "b.ptx", "-o", "x"])


def test_this_machine_can_pin_the_layout():
    """Where ASLR cannot be switched off (e.g. Docker's default seccomp profile) cubins may differ: say so."""
    assert ptxas_pin.aslr_switchable(), "personality(ADDR_NO_RANDOMIZE) is refused here"


def test_two_builds_give_the_same_digests_for_every_variant(tmp_path):
    from registry.publisher.build import build

    source = tmp_path / "src" / "fused_mlp"
    shutil.copytree(ROOT / "kernel_src" / "fused_mlp", source, ignore=shutil.ignore_patterns("__pycache__"))
    narrow = {"aot_archs": (ARCH,), "aot_kwargs": {"dtypes": ("bf16",), "kernels": ("act_and_mul_kernel",)}}
    variants = ["torch-cuda", "torch-cpu", "torch-universal"]
    metas = []
    for name in ("one", "build-two"):
        out = build(
            source, tmp_path / name / "fused-mlp", ROOT / "build" / "matrix.toml", only=variants, **narrow
        ).out
        metas.append({v: (out / "build" / v / "metadata.json").read_bytes() for v in variants})
    assert metas[0] == metas[1]
    shipped = [f for f in json.loads(metas[0]["torch-cuda"])["digest"]["files"] if "/cubins/" in f]
    assert shipped and all(f.endswith(f"/{ARCH}.zip") for f in shipped), shipped  # one bundle per arch
