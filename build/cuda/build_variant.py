"""Build the CUDA variant's extension (build/matrix.toml's `kind = "cuda"` variant) on a machine without a GPU.

`build_cuda_variant(package_dir, out_dir, matrix, python)` compiles the Triton kernels that the package's
path table (`fused_mlp/cuda/paths.py`) runs ahead of time and embeds their cubins (embed_cubins.py), compiles
kernel_src's CUDA sources with nvcc against CUDA torch headers (torch stable ABI, abi3), makes a wheel,
repairs it to manylinux_2_28 with auditwheel (torch and CUDA libraries excluded), checks the ABI and arch
rules (abi_check.py) and puts `_C.abi3.so` plus `build.json` into `package_dir/cuda/`. The builder
(`kernel-hub build`) calls it; `python build/cuda/build_variant.py` runs it by hand.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
# Where the command line builds (the staged package, scratch, wheels): an ignored output folder, never build/,
# which holds sources only.
DEFAULT_OUT = REPO / "dist" / "cuda-recipe"
sys.path.insert(0, str(HERE))
import abi_check
import embed_cubins

SO_IN_WHEEL = "fused_mlp/cuda/_C.abi3.so"
# Shared libraries the wheel must not carry: torch has loaded them when the extension is opened.
REPAIR_EXCLUDES = ("libtorch*.so", "libc10*.so", "libcudart.so.13", "libcublasLt.so.13", "libcublas.so.13")


class CudaBuildUnavailable(RuntimeError):
    """The machine lacks what the CUDA build needs (nvcc 13, a CUDA 13 torch); the message says what."""


class CudaBuildError(RuntimeError):
    """The build ran but failed, or its result broke an ABI/arch rule."""


def cuda_variant_name(matrix: dict) -> str:
    """The name of the matrix's one `kind = "cuda"` variant, the one this recipe builds."""
    names = [name for name, spec in matrix.get("variants", {}).items() if spec.get("kind") == "cuda"]
    if len(names) != 1:
        raise CudaBuildError(f'build/matrix.toml must list one variant of kind "cuda"; it lists {names}')
    return names[0]


# The variant this recipe builds, as build/matrix.toml (beside this folder) names it: the one definition.
VARIANT = cuda_variant_name(tomllib.loads((HERE.parent / "matrix.toml").read_text()))


@dataclass(frozen=True)
class CudaPlan:
    archs: tuple[str, ...]  # SASS archs, "sm_90a"
    ptx: tuple[str, ...]  # archs that also ship PTX
    torch_target: str  # "2.11"
    cuda: str  # "13.0"


@dataclass(frozen=True)
class TritonAot:
    """How Triton kernels get into the extension. `python`: an interpreter with Triton and torch (default:
    this one when it has Triton, else the repository's .venv); `reuse`: a folder of compile_all output
    (<triton>/<arch>/...) whose cubins are taken instead of compiling them again; `archs`: limit to these
    (default: every matrix arch the path table runs Triton kernels on); `dtypes`: cubin dtypes."""

    python: str | None = None
    reuse: Path | None = None
    archs: tuple[str, ...] | None = None
    dtypes: tuple[str, ...] = ("bf16", "fp16")


@dataclass(frozen=True)
class Toolchain:
    cuda_home: Path
    python: str  # has CUDA torch (headers + libraries to link), auditwheel, kernel_abi_check
    cuobjdump: str


def cuda_plan(matrix: dict) -> CudaPlan:
    """The CUDA variant's entry of the parsed build/matrix.toml."""
    spec = matrix.get("variants", {}).get(VARIANT)
    if spec is None:
        raise CudaBuildError(
            f"build/matrix.toml has no [variants.{VARIANT}]; add it to build the CUDA variant"
        )
    archs, ptx = tuple(spec["archs"]), tuple(spec.get("ptx", ()))
    if not set(ptx) <= set(archs):
        raise CudaBuildError(f"[variants.{VARIANT}] ptx {list(ptx)} must be a subset of archs {list(archs)}")
    return CudaPlan(archs, ptx, str(spec["torch_target"]), str(spec["cuda"]))


def restrict_plan(plan: CudaPlan, archs: tuple[str, ...] | None) -> CudaPlan:
    """The plan limited to `archs` (None: unchanged); an arch the matrix does not build is an error."""
    if archs is None:
        return plan
    unknown = sorted(set(archs) - set(plan.archs))
    if unknown:
        raise CudaBuildError(f"arch(s) {unknown} are not in [variants.{VARIANT}] archs {list(plan.archs)}")
    keep = tuple(a for a in plan.archs if a in archs)
    return CudaPlan(keep, tuple(a for a in plan.ptx if a in keep), plan.torch_target, plan.cuda)


def torch_arch_list(plan: CudaPlan) -> str:
    """TORCH_CUDA_ARCH_LIST for the plan: sm_90a -> 9.0a, sm_120 with PTX -> 12.0+PTX."""
    parse = embed_cubins.arch_notation().parse_arch
    return ";".join(parse(arch).dotted(ptx=arch in plan.ptx) for arch in plan.archs)


def torch_target_hex(version: str) -> str:
    """torch's TORCH_TARGET_VERSION constant for "2.11": 0x020b000000000000."""
    major, minor = (int(p) for p in version.split(".")[:2])
    return f"0x{major:02x}{minor:02x}000000000000"


def read_namespace(package_dir: Path) -> str:
    """OPS_NAMESPACE from the package's _build_info.py (the builder rewrites it per variant)."""
    tree = ast.parse((package_dir / "_build_info.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            getattr(t, "id", "") == "OPS_NAMESPACE" for t in node.targets
        ):
            return ast.literal_eval(node.value)
    raise CudaBuildError(f"{package_dir / '_build_info.py'} defines no OPS_NAMESPACE")


def extension_env(package_dir: Path, plan: CudaPlan) -> dict[str, str]:
    """The variables setup.py reads: sources, op namespace, torch target and arch list of this build
    (FUSED_MLP_GEN, the generated cubin table, is added by build_cuda_variant)."""
    return {
        "FUSED_MLP_CSRC": str(Path(package_dir) / "cuda" / "csrc"),
        "FUSED_MLP_NS": read_namespace(Path(package_dir)),
        "TORCH_TARGET_VERSION": torch_target_hex(plan.torch_target),
        "TORCH_CUDA_ARCH_LIST": torch_arch_list(plan),
    }


def _cuda_torch_info(python: str) -> tuple[str | None, str]:
    """(torch's CUDA version or None, torch's package dir) in `python`; (None, why) when torch is missing."""
    code = "import torch, os; print(torch.version.cuda); print(os.path.dirname(torch.__file__))"
    try:
        proc = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    except OSError as exc:
        return None, str(exc)
    if proc.returncode != 0:
        return None, proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "torch import failed"
    cuda, torch_dir = proc.stdout.split()[-2:]
    return (None if cuda == "None" else cuda), torch_dir


def _candidate_pythons(python: str | None) -> list[str]:
    found = [os.environ.get("KERNEL_HUB_CUDA_PYTHON"), python, str(REPO / ".venv-cuda" / "bin" / "python")]
    return [p for i, p in enumerate(found) if p and p not in found[:i]]


def find_toolchain(python: str | None, cuda_major: str = "13") -> Toolchain:
    """nvcc of CUDA `cuda_major` and a python with a CUDA `cuda_major` torch; CudaBuildUnavailable says what is missing."""
    home = Path(os.environ.get("CUDA_HOME") or f"/usr/local/cuda-{cuda_major}.0")
    nvcc = home / "bin" / "nvcc"
    if not nvcc.exists():
        on_path = shutil.which("nvcc")
        if on_path is None:
            raise CudaBuildUnavailable(
                f"no nvcc: {nvcc} does not exist and none is on PATH; install the CUDA "
                f"{cuda_major} toolkit or set CUDA_HOME"
            )
        home, nvcc = Path(on_path).resolve().parent.parent, Path(on_path)
    tried = []
    for cand in _candidate_pythons(python):
        cuda, torch_dir = _cuda_torch_info(cand)
        if cuda is not None and cuda.split(".")[0] == cuda_major:
            cuobjdump = _find_cuobjdump(Path(torch_dir).parent)
            return Toolchain(home, cand, cuobjdump)
        tried.append(f"{cand}: {'torch for CUDA ' + cuda if cuda else torch_dir}")
    raise CudaBuildUnavailable(
        f"no python with a CUDA {cuda_major} torch (tried {'; '.join(tried)}); run `make venv-cuda` "
        "or set KERNEL_HUB_CUDA_PYTHON"
    )


def _find_cuobjdump(site_packages: Path) -> str:
    for cand in (shutil.which("cuobjdump"), site_packages / "triton" / "backends" / "nvidia" / "bin" / "cuobjdump",
                 REPO / ".venv" / "lib" / "python3.11" / "site-packages" / "triton" / "backends" / "nvidia" / "bin" / "cuobjdump"):  # fmt: skip
        if cand and Path(cand).exists():
            return str(cand)
    raise CudaBuildUnavailable(
        "no cuobjdump on PATH or in triton's package (pip install triton, or the CUDA toolkit's)"
    )


def cuda_unavailable_reason(python: str | None = None) -> str | None:
    """None when this machine can build the CUDA variant, else what is missing."""
    try:
        find_toolchain(python)
    except CudaBuildUnavailable as exc:
        return str(exc)
    return None


def _run(cmd: list[str], env: dict, cwd: Path, what: str) -> None:
    proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        lines = (proc.stdout + proc.stderr).strip().splitlines()
        errors = [ln for ln in lines if " error" in ln or ln.startswith("error")][:20]
        raise CudaBuildError(f"{what} failed (exit {proc.returncode}):\n" + "\n".join(errors + lines[-25:]))


def triton_python(wanted: str | None) -> str | None:
    """A python that has Triton for the AOT compile: `wanted`, this one, or the repository's .venv; None if none."""
    for cand in (wanted, sys.executable, str(REPO / ".venv" / "bin" / "python")):
        if (
            cand
            and subprocess.run(
                [cand, "-c", "import triton, torch"], capture_output=True, check=False
            ).returncode
            == 0
        ):
            return cand
    return None


def embed_triton(
    package_dir: Path, work: Path, plan: CudaPlan, aot: TritonAot | None, cuobjdump: str
) -> dict:
    """Write work/gen/triton_table.gen.cpp (cubins + path table); returns the build.json record of it."""
    paths = embed_cubins.load_paths(package_dir)
    archs = [a for a in plan.archs if aot is None or aot.archs is None or a in aot.archs]
    want = embed_cubins.wanted_kernels(paths, archs)
    gen = work / "gen"
    shutil.rmtree(gen, ignore_errors=True)
    rows, note = None, ""
    if aot is None:
        note = "Triton kernels not embedded (AOT off): every step runs its cuBLASLt/CUDA fallback"
    elif not want:
        note = f"the path table runs no Triton kernel on {', '.join(archs)}: none embedded"
    else:
        py = triton_python(aot.python)
        if py is None:
            note = ("Triton kernels not embedded: no python with triton and torch found (pass TritonAot.python); "
                    "every step runs its cuBLASLt/CUDA fallback")  # fmt: skip
        else:
            try:
                rows = embed_cubins.aot_rows(
                    package_dir, py, want, work / "cubins", reuse=aot.reuse, dtypes=aot.dtypes
                )
            except embed_cubins.EmbedError as exc:
                raise CudaBuildError(str(exc)) from None
            how = [f"{verb} {arch}: {', '.join(roles)}" for verb in ("compiled", "reused")
                   for arch, roles in rows[verb].items()]  # fmt: skip
            note = f"Triton {rows['triton']} cubins ({'; '.join(how)})"
    try:
        summary = embed_cubins.write_sources(gen, package_dir, rows, cuobjdump, note)
    except embed_cubins.EmbedError as exc:
        raise CudaBuildError(str(exc)) from None
    return {"version": summary.triton, "archs": list(summary.archs), "cubins": summary.cubins,
            "entries": summary.entries, "note": summary.note}  # fmt: skip


def build_cuda_variant(
    package_dir: Path,
    out_dir: Path,
    matrix: dict,
    python: str | None,
    *,
    triton: TritonAot | None = TritonAot(),
    archs: tuple[str, ...] | None = None,
) -> Path:
    """Compile, repair and check the extension; put `_C.abi3.so` and `build.json` into `package_dir/cuda/`.

    package_dir: the variant's staged `fused_mlp` package (its `_build_info.py` names the op namespace,
    `cuda/csrc/` holds the sources). out_dir: scratch for build files and the wheels (kept as CI
    artifacts). matrix: parsed build/matrix.toml. python: a python with a CUDA 13 torch, or None to use
    $KERNEL_HUB_CUDA_PYTHON / .venv-cuda. triton: how Triton cubins get embedded (None: not at all; then
    the path table's Triton rows run their fallbacks). archs: build only these of the matrix's archs (a
    smaller .so for one GPU; build.json records them). Returns the placed .so path.
    """
    plan = restrict_plan(cuda_plan(matrix), archs)
    tools = find_toolchain(python, plan.cuda.split(".")[0])
    package_dir, out_dir = Path(package_dir).resolve(), Path(out_dir).resolve()
    ext_env = extension_env(package_dir, plan)
    work, dist, wheelhouse = out_dir / "work", out_dir / "dist", out_dir / "wheelhouse"
    for d in (dist, wheelhouse):
        shutil.rmtree(d, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    triton_record = embed_triton(package_dir, work, plan, triton, tools.cuobjdump)
    ext_env["FUSED_MLP_GEN"] = str(work / "gen")
    bin_dir = str(Path(tools.python).parent)
    env = {
        **os.environ,
        "CUDA_HOME": str(tools.cuda_home),
        "PATH": os.pathsep.join([bin_dir, str(tools.cuda_home / "bin"), os.environ.get("PATH", "")]),
        **ext_env,
        "MAX_JOBS": os.environ.get("MAX_JOBS", "2"),
    }
    _run(
        [tools.python, str(HERE / "setup.py"), "-q", "bdist_wheel", "--dist-dir", str(dist)],
        env,
        work,
        "nvcc build",
    )
    (wheel,) = dist.glob("*.whl")
    excludes = [arg for pat in REPAIR_EXCLUDES for arg in ("--exclude", pat)]
    _run([str(Path(bin_dir) / "auditwheel"), "repair", "--plat", "manylinux_2_28_x86_64", *excludes,
          "-w", str(wheelhouse), str(wheel)], env, work, "auditwheel repair")  # fmt: skip
    (repaired,) = wheelhouse.glob("*.whl")
    target = package_dir / "cuda" / "_C.abi3.so"
    with zipfile.ZipFile(repaired) as zf:
        target.write_bytes(zf.read(SO_IN_WHEEL))
    checks = abi_check.run_checks(target, tools.cuobjdump, tools.python, list(plan.archs), list(plan.ptx))
    record = {
        "variant": VARIANT, "namespace": ext_env["FUSED_MLP_NS"], "archs": list(plan.archs), "ptx": list(plan.ptx),
        "torch_target": plan.torch_target, "cuda": plan.cuda, "wheel": repaired.name,
        "checks": [c.as_dict() for c in checks], "triton": triton_record,
    }  # fmt: skip
    (package_dir / "cuda" / "build.json").write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    failed = [c for c in checks if not c.ok]
    if failed:
        target.unlink()
        raise CudaBuildError("ABI/arch checks failed: " + "; ".join(f"{c.name}: {c.detail}" for c in failed))
    return target


def stage_dev_package(source: Path, stage: Path) -> Path:
    """A fresh copy of the source package under `stage` (so builds never write into kernel_src)."""
    dest = stage / source.name
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(source, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.so", "build.json"))
    return dest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--package",
        type=Path,
        default=None,
        help="staged fused_mlp package to build into (default: a copy of kernel_src/fused_mlp "
        "in <out>/stage, importable with PYTHONPATH=<out>/stage)",
    )
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help=f"scratch/wheel folder (default {DEFAULT_OUT})"
    )
    parser.add_argument("--matrix", type=Path, default=REPO / "build" / "matrix.toml")
    parser.add_argument("--python", default=None, help="python with a CUDA 13 torch (default: .venv-cuda)")
    parser.add_argument(
        "--arch", action="append", help="build only this matrix arch (repeatable), e.g. sm_90a"
    )
    parser.add_argument("--no-triton", action="store_true", help="embed no Triton cubins (fallbacks only)")
    parser.add_argument("--dtypes", default="bf16,fp16", help="dtypes of the embedded Triton cubins")
    args = parser.parse_args(argv)
    package = args.package or stage_dev_package(REPO / "kernel_src" / "fused_mlp", args.out / "stage")
    aot = None if args.no_triton else TritonAot(dtypes=tuple(args.dtypes.split(",")))
    so = build_cuda_variant(package, args.out, tomllib.loads(args.matrix.read_text()), args.python, triton=aot,
                            archs=tuple(args.arch) if args.arch else None)  # fmt: skip
    print(so)
    record = json.loads((so.parent / "build.json").read_text())
    print(f"  archs {record['archs']}; triton: {record['triton']['note']}")
    for check in record["checks"]:
        print(f"  {'ok  ' if check['ok'] else 'FAIL'} {check['name']}: {check['detail']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
