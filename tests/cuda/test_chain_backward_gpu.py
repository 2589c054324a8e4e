"""The persistent backward kernel (csrc/chain_backward.cu: a whole small-batch `mlp` / `linear` backward in one
cooperative launch) on a GPU: every gradient against float64 in bf16 and fp16 at every row count it takes
(1-64 rows, across its 16-row tiles), real and odd layer widths (multiples of 16 that are not of its 64x128 weight
tiles), with and without biases, relu and none (a relu last layer, as `linear` has), leading batch dims,
capture inside a user's CUDA graph, and the calls it must refuse (65 rows, fp32, gelu, dims not multiples of
16, gradients flowing into hidden outputs), which must still be right. A profiler trace tells whether the
kernel really ran. Runs against a built variant, as tests/cuda/test_cuda_gpu.py."""

import itertools
import sys
from functools import partial
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parents[1] / "kernels"))
sys.path.insert(0, str(Path(__file__).parent))
import fused_mlp.reference as ref
from kernel_numerics import (
    SAME_SAVED_TOL,
    as64,
    assert_close,
    randn,
    rel_err,
    relu_chain_backward64,
    relu_chain_outputs,
)
from test_cuda_gpu import NS, OK, WHY, check_grads, forced, launched

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not OK, reason=f"CUDA backend unavailable: {WHY}")]
if OK:
    from fused_mlp.cuda import ops
DEV = "cuda"


def ran_backward_kernel(call) -> bool:
    """Whether `call` launched the persistent backward kernel."""
    return launched(call, "chain_backward_kernel")


def mlp_params(rows, dims, dtype, with_bias, lead=()):
    x = randn(*lead, rows, dims[0], dtype=dtype, device=DEV, grad=True)
    ws = [randn(o, i, dtype=dtype, device=DEV, scale=i**-0.5, grad=True) for i, o in itertools.pairwise(dims)]
    bs = [randn(o, dtype=dtype, device=DEV, grad=True) for o in dims[1:]] if with_bias else []
    return x, ws, bs


def saved_outputs(out, layers):
    """Every layer's output as the op saved it for its backward (its Mlp autograd node, found behind `out`)."""
    stack, seen = [out.grad_fn], set()
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if type(node).__name__ == "MlpBackward":
            return node.saved_tensors[-layers:]
        stack.extend(n for n, _ in node.next_functions)
    raise AssertionError("no Mlp autograd node behind the output")


def check_mlp(rows, dims, dtype, activation, with_bias, what, lead=(), must_run=True):
    """Forward and every gradient of ops.mlp against float64; whether the backward kernel ran is `must_run`.
    A 16-bit relu chain's gradients are checked against float64 of the op's own saved outputs: against the
    float64 forward one relu flip (a hidden pre-activation within rounding of 0, ~1 per sample at 17x1024 in fp16)
    moves dx by ~1e-2, more than the kernel's whole error, and our forward and eager's flip different elements."""
    x, ws, bs = mlp_params(rows, dims, dtype, with_bias, lead)
    out = ops.mlp(x, ws, bs or None, activation)
    p64 = as64(x, *ws, *bs)
    n = len(ws)
    expected = ref.mlp(p64[0], p64[1 : 1 + n], p64[1 + n :] or None, activation)
    assert_close(out, expected, dtype, f"{what}: forward")
    if activation == "relu" and dtype != torch.float32:
        dy = torch.randn_like(out)
        got = torch.autograd.grad(out, (x, *ws, *bs), dy, retain_graph=True)
        want = relu_chain_backward64(dy, x, ws, saved_outputs(out, n), store=dtype)[: len(got)]
        for i, (g, w) in enumerate(zip(got, want)):
            err = rel_err(g.reshape(w.shape), w)
            assert err <= SAME_SAVED_TOL[dtype], (
                f"{what} grad of input {i}: {err:.3e} > {SAME_SAVED_TOL[dtype]}"
            )
    else:
        check_grads(out, (x, *ws, *bs), expected, p64, dtype, what)
    upstream = torch.randn_like(out)
    ran = ran_backward_kernel(lambda: ops.mlp(x, ws, bs or None, activation).backward(upstream))
    assert ran == must_run, f"{what}: the backward kernel {'did not run' if must_run else 'ran'}"


@pytest.mark.parametrize("dtype", (torch.bfloat16, torch.float16))
def test_mlp_backward_matches_float64(dtype):
    """Every row count across the kernel's 16-row tiles; widths on and off its 64x128 weight tiles."""
    with forced("chain_backward", "persistent"):
        for rows in (1, 5, 16, 17, 32, 33, 48, 64):
            for dims, with_bias in (((1024, 1024, 1024, 1024), True), ((64, 208, 48, 16), False)):
                check_mlp(rows, dims, dtype, "relu", with_bias, f"mlp backward {dims} M={rows} {dtype}")


def backward_given_outputs(rows, dims, dtype, impl):
    """The backward op alone, with `impl` forced, on saved outputs an eager forward made; and float64 of the
    same (relu' read from those outputs, so no relu flip of a forward enters either side)."""
    x = randn(rows, dims[0], dtype=dtype, device=DEV)
    ws = [randn(o, i, dtype=dtype, device=DEV, scale=i**-0.5) for i, o in itertools.pairwise(dims)]
    bs = [randn(o, dtype=dtype, device=DEV) for o in dims[1:]]
    outs = relu_chain_outputs(x, ws, bs)
    dy = randn(rows, dims[-1], dtype=dtype, device=DEV)
    with forced("chain_backward", impl):
        call = partial(NS.cuda_mlp_backward, dy, [], x, ws, bs, outs, "relu")
        got = call()
        ran = ran_backward_kernel(call)
    return got, relu_chain_backward64(dy, x, ws, outs, store=dtype), ran


@pytest.mark.parametrize("dtype", (torch.bfloat16, torch.float16))
def test_backward_matches_float64_of_its_own_saved_outputs(dtype):
    """Without relu flips in the way (they move a gradient by ~1e-2 per flip at these sizes), every gradient
    of the kernel is within a few roundings of float64 (SAME_SAVED_TOL) and within 3x the cuBLASLt layers'
    error on the same inputs, at every row count the kernel takes (it must run at each)."""
    for rows in (1, 7, 16, 17, 40, 64):
        for dims in ((1024, 1024, 1024, 1024), (64, 208, 48, 16), (768, 3072)):
            torch.manual_seed(rows)
            got, want, ran = backward_given_outputs(rows, dims, dtype, "persistent")
            torch.manual_seed(rows)
            base, _, _ = backward_given_outputs(rows, dims, dtype, "layers")
            assert ran, f"{dims} M={rows}: the backward kernel did not run"
            for i, (g, w, b) in enumerate(zip(got, want, base)):
                err, bound = rel_err(g, w), max(SAME_SAVED_TOL[dtype], 3 * rel_err(b, w))
                assert err <= bound, f"{dims} M={rows} {dtype} gradient {i}: {err:.3e} > {bound:.3e}"


@pytest.mark.parametrize("activation", ("relu", "none"))
def test_mlp_backward_activations_and_leading_dims(activation):
    with forced("chain_backward", "persistent"):
        check_mlp(
            7, (128, 256, 128), torch.bfloat16, activation, True, f"mlp backward {activation}", lead=(2,)
        )
        check_mlp(
            3, (768, 3072, 768), torch.bfloat16, activation, True, f"mlp backward 768x3072 {activation}"
        )


@pytest.mark.parametrize("activation", ("relu", "none"))
@pytest.mark.parametrize("with_bias", (True, False))
def test_linear_backward(activation, with_bias):
    """One layer; with relu the kernel first masks dy by the saved output (its only pre-pass)."""
    d = torch.bfloat16
    with forced("chain_backward", "persistent"):
        for rows, k, n in ((16, 1024, 4096), (11, 96, 208)):
            x = randn(rows, k, dtype=d, device=DEV, grad=True)
            w = randn(n, k, dtype=d, device=DEV, scale=k**-0.5, grad=True)
            b = randn(n, dtype=d, device=DEV, grad=True) if with_bias else None
            out = ops.linear(x, w, b, activation)
            p64 = as64(x, w, b)
            expected = ref.linear(*p64, activation)
            assert_close(out, expected, d, "linear forward")
            check_grads(out, (x, w, b), expected, p64, d, f"linear backward {activation} M={rows} {k}->{n}")
            step = partial(lambda x, w, b, up: ops.linear(x, w, b, activation).backward(up), x, w, b)
            assert ran_backward_kernel(partial(step, torch.randn_like(out)))


def test_backward_refuses_what_it_cannot_take_and_the_layers_are_right():
    """Each call the kernel must not take runs the cuBLASLt layers, with correct gradients."""
    d = torch.bfloat16
    with forced("chain_backward", "persistent"):
        check_mlp(65, (128, 128, 128), d, "relu", True, "refused: 65 rows", must_run=False)
        check_mlp(16, (128, 128, 128), torch.float32, "relu", True, "refused: fp32", must_run=False)
        check_mlp(16, (128, 128, 128), d, "gelu", True, "refused: gelu", must_run=False)
        check_mlp(16, (128, 72, 128), d, "relu", True, "refused: hidden dim 72", must_run=False)
        check_mlp(16, (64,) * 10, d, "relu", False, "refused: 9 layers", must_run=False)
    with forced("chain_backward", "layers"):
        check_mlp(16, (128, 128, 128), d, "relu", True, "forced layers", must_run=False)


def test_backward_with_gradients_into_hidden_outputs():
    """The registered op returns every layer's output; gradients flowing into a hidden one take the layers."""
    d = torch.bfloat16
    with forced("chain_backward", "persistent"):
        x, ws, bs = mlp_params(16, (128, 256, 128), d, True)
        outs = NS.cuda_mlp(x, ws, bs, "relu")
        loss = (outs[-1].float() * 2).sum() + (outs[0].float() ** 2).sum()
        got = torch.autograd.grad(loss, (x, *ws, *bs))
        p64 = as64(x, *ws, *bs)
        h = torch.relu(p64[0] @ p64[1].T + p64[3])
        y = h @ p64[2].T + p64[4]
        want = torch.autograd.grad((y * 2).sum() + (h**2).sum(), p64)
        for i, (g, w) in enumerate(zip(got, want)):
            assert_close(g, w, d, f"hidden-output gradients, input {i}")


def test_backward_inside_a_user_cuda_graph():
    """Forward + backward captured once, replayed on new inputs and upstream gradients."""
    d = torch.bfloat16
    with forced("chain_backward", "persistent"):
        x, ws, bs = mlp_params(16, (1024, 1024, 1024, 1024), d, True)
        params = [*ws, *bs]
        upstream = torch.randn(16, 1024, dtype=d, device=DEV)

        def step():
            for p in (x, *params):
                p.grad = None
            ops.mlp(x, ws, bs, "relu").backward(upstream)

        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            step()  # warm-up outside capture (plans, kernel preparation)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        for p in (x, *params):
            p.grad = None
        with torch.cuda.graph(graph):
            ops.mlp(x, ws, bs, "relu").backward(upstream)
        grads_out = [x.grad, *(p.grad for p in params)]
        for _ in range(3):
            with torch.no_grad():
                x.copy_(torch.randn_like(x))
                upstream.copy_(torch.randn_like(upstream))
            graph.replay()
            torch.cuda.synchronize()
            p64 = as64(x, *ws, *bs)
            out64 = ref.mlp(p64[0], p64[1:4], p64[4:], "relu")
            want = torch.autograd.grad(out64, p64, upstream.double())
            eager = torch.autograd.grad(ref.mlp(x, ws, bs, "relu"), (x, *params), upstream)
            for i, (g, w, e) in enumerate(zip(grads_out, want, eager)):
                bound = max(2.5e-2, 3 * ((e.double() - w).norm() / w.norm()).item())
                err = ((g.double() - w).norm() / w.norm()).item()
                assert err <= bound and not torch.isnan(g).any(), (
                    f"replayed grad {i}: {err:.3e} > {bound:.3e}"
                )
