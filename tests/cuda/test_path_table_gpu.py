"""The path table as the built extension reads it, on this GPU: cuda_build_info's choices (every op's steps
per M, calls one by one and captured, for small weights and at each weight bound of the device's arch's rows)
are what the variant's paths.py says (path_oracle); and where a row's weight bound changes a forward linear or
gate_up choice, a call whose weights reach the bound launches the chosen kernel, one just under it the other,
both right against float64. Runs against a built variant (tests/cuda/conftest.py):
FUSED_MLP_VARIANT_DIR=<dist>/build/torch-stable-abi211-cu130-x86_64-linux pytest -m gpu tests/cuda/test_path_table_gpu.py"""

import json
import math
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parents[1] / "kernels"))
import fused_mlp
import fused_mlp.reference as ref
import path_oracle
from kernel_numerics import as64, assert_close, randn
from test_cuda_gpu import NS, OK, WHY, launched_names

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not OK, reason=f"CUDA backend unavailable: {WHY}")]
if OK:
    from fused_mlp.cuda import ops
DEV = "cuda"
K = 1024  # the weights' in dim; the out dim (or I) grows in 256-column steps to reach a bound
ROWS = (65, 128, 256, 257, 512, 1024, 1025, 2048, 2049, 4096)  # past the decode and persistent kernels' rows


@pytest.fixture(scope="module")
def paths():
    """The path table this variant was built from (its own fused_mlp/cuda/paths.py)."""
    return path_oracle.embed_cubins.load_paths(Path(fused_mlp.__file__).parent)


def test_build_info_reports_the_table_at_every_weight_bound(paths):
    info = json.loads(NS.cuda_build_info(0))
    sm = info["sm"]
    bounds = path_oracle.weight_bounds(paths, sm)
    assert [e["min_weight_bytes"] for e in info["paths_by_weight"]] == bounds, info["paths_by_weight"]
    by_weight = [(e["min_weight_bytes"], e["paths"]) for e in info["paths_by_weight"]]
    for weight, table in [(0, info["paths"]), *by_weight]:
        assert list(table) == [f"{op}/{step}" for op, steps in paths.OP_STEPS.items() for step in steps]
        for key, rows in table.items():
            op, step = key.split("/")
            want = [[m, *(path_oracle.choose(paths, op, step, sm, m, weight, cap) for cap in (False, True))]
                    for m, _, _ in rows]  # fmt: skip
            assert rows == want, f"{key} at {weight} weight bytes"


def _case(op: str, step: str, rows: int, cols: int, dtype):
    """(call, float64 expectation, weight bytes) of `op` at `rows` rows with weights of `cols` x K (gate_up: I)."""
    x = randn(rows, K, dtype=dtype, device=DEV)
    if step == "linear":
        w, b = randn(cols, K, dtype=dtype, device=DEV, scale=K**-0.5), randn(cols, dtype=dtype, device=DEV)
        x64, w64, b64 = as64(x, w, b)
        if op == "linear":
            return (
                (lambda: ops.linear(x, w, b, "gelu_tanh")),
                ref.linear(x64, w64, b64, "gelu_tanh"),
                w.nbytes,
            )
        return (lambda: ops.mlp(x, [w], [b], "relu")), ref.mlp(x64, [w64], [b64], "relu"), w.nbytes
    grad = op == "gated_mlp_train"  # weights that need grad: the training forward (it also stores (g, u))
    wg, wu = (randn(cols, K, dtype=dtype, device=DEV, scale=K**-0.5, grad=grad) for _ in range(2))
    wd = randn(K, cols, dtype=dtype, device=DEV, scale=cols**-0.5, grad=grad)
    want = ref.gated_mlp(*as64(x, wg, wu, wd), "silu")
    return (lambda: ops.gated_mlp(x, wg, wu, wd, "silu").detach()), want, wg.nbytes + wu.nbytes


def test_a_weight_bound_switches_the_launched_kernel(paths):
    """For every weight bound of the device's arch and forward (op, step) of linear / gate_up whose choice it
    changes at some M: the call at the bound launches the chosen implementation's kernel (none of ours for
    cublaslt / split), the call 256 columns under it the other's."""
    sm, dtype = json.loads(NS.cuda_build_info(0))["sm"], torch.bfloat16
    ours = {step: {k for (s, _), (k, _) in paths.TRITON_KERNELS.items() if s == step} for step in paths.STEPS}
    checked = []
    for bound in (b for b in path_oracle.weight_bounds(paths, sm) if b <= 4 << 30):
        for op, step in (("linear", "linear"), ("mlp", "linear"), ("gated_mlp", "gate_up"),
                         ("gated_mlp_train", "gate_up")):  # fmt: skip
            # bytes of one weight row in bf16 (gate_up: a gate row and an up row)
            per_col = K * 2 * (2 if step == "gate_up" else 1)
            hi = math.ceil(bound / per_col / 256) * 256
            sizes = [c for c in (hi - 256, hi) if c > 0]
            for rows in ROWS:
                impls = {c: path_oracle.choose(paths, op, step, sm, rows, c * per_col, False) for c in sizes}
                if len(set(impls.values())) < 2:
                    continue
                for cols, impl in impls.items():
                    call, want, weight_bytes = _case(op, step, rows, cols, dtype)
                    assert (weight_bytes >= bound) == (cols == hi), (weight_bytes, bound)
                    out = torch.full(want.shape, float("nan"), dtype=dtype, device=DEV)
                    names = launched_names(lambda call=call, out=out: out.copy_(call())) & ours[step]
                    kernel = paths.TRITON_KERNELS.get((step, impl), (None,))[0]
                    what = f"{op}/{step} M={rows} {weight_bytes} weight bytes (bound {bound}): {impl}"
                    assert names == ({kernel} if kernel else set()), f"{what}, but launched {names}"
                    assert_close(out, want, dtype, what)
                    checked.append(what)
    if not checked:
        pytest.skip(f"no weight bound of sm {sm}'s rows changes a forward linear or gate_up choice at M > 64")
    print("\n".join(checked))
