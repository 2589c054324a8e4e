"""The persistent backward kernel (csrc/chain_backward.cu: a whole small-batch `mlp` / `linear` / `gated_mlp`
backward in one cooperative launch) on a GPU: every gradient against float64 in bf16 and fp16 at every row count it takes
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
    ACTIVATIONS,
    SAME_SAVED_TOL,
    as64,
    assert_close,
    gated_backward64,
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


def captured_step(step, leaves):
    """A user's capture of `step()` (a forward + backward into the leaves' .grad): one call on a side stream first
    (plans, kernel preparation), then the capture. Returns the graph and the gradient tensors it writes."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    for p in leaves:
        p.grad = None
    with torch.cuda.graph(graph):
        step()
    return graph, [p.grad for p in leaves]


def replayed(graph, x, upstream, times=3):
    """Replays `graph` `times` times, each on fresh values of x and the upstream gradient; yields after each."""
    for _ in range(times):
        with torch.no_grad():
            x.copy_(torch.randn_like(x))
            upstream.copy_(torch.randn_like(upstream))
        graph.replay()
        torch.cuda.synchronize()
        yield


def test_backward_inside_a_user_cuda_graph():
    """Forward + backward captured once, replayed on new inputs and upstream gradients."""
    d = torch.bfloat16
    with forced("chain_backward", "persistent"):
        x, ws, bs = mlp_params(16, (1024, 1024, 1024, 1024), d, True)
        params = [*ws, *bs]
        upstream = torch.randn(16, 1024, dtype=d, device=DEV)
        graph, grads_out = captured_step(lambda: ops.mlp(x, ws, bs, "relu").backward(upstream), (x, *params))
        for _ in replayed(graph, x, upstream):
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


# ---- gated_mlp: the gated layer (dg, du from the saved (g, u) as dh is stored) and the down projection ----


def gated_params(rows, hidden, inter, out, dtype, grad=False, lead=()):
    x = randn(*lead, rows, hidden, dtype=dtype, device=DEV, grad=grad)
    wg = randn(inter, hidden, dtype=dtype, device=DEV, scale=hidden**-0.5, grad=grad)
    wu = randn(inter, hidden, dtype=dtype, device=DEV, scale=hidden**-0.5, grad=grad)
    wd = randn(out, inter, dtype=dtype, device=DEV, scale=inter**-0.5, grad=grad)
    return x, wg, wu, wd


def gated_backward_given_saved(rows, shape, dtype, activation, impl):
    """The gated backward op alone, with `impl` forced, on the (h, g, u) the op's own training forward saved;
    and float64 of the same (act, act' at the saved g)."""
    x, wg, wu, wd = gated_params(rows, *shape, dtype)
    _, h, gu = NS.cuda_gated_mlp_train(x, wg, wu, wd, activation)
    dy = randn(rows, shape[2], dtype=dtype, device=DEV)
    with forced("chain_backward", impl):
        call = partial(NS.cuda_gated_mlp_backward, dy, None, x, wg, wu, wd, h, gu, activation)
        got = call()
        ran = ran_backward_kernel(call)
    return got, gated_backward64(dy, x, wg, wu, wd, h, gu, activation, store=dtype), ran


@pytest.mark.parametrize("dtype", (torch.bfloat16, torch.float16))
def test_gated_backward_matches_float64_of_its_own_saved_outputs(dtype):
    """dx, (dw_gate, dw_up) and dw_down within a few roundings of float64 and 3x the cuBLASLt path's error on the
    same inputs, every activation, at the row counts the kernel takes for the real shape (1-16) and an odd one
    (I = 208: n = 2I rows not a multiple of its 64-row weight tiles; out dim 48 != hidden)."""
    for rows in (1, 5, 16):
        for shape in ((768, 3072, 768), (96, 208, 48)):
            for activation in ACTIVATIONS:
                torch.manual_seed(rows)
                got, want, ran = gated_backward_given_saved(rows, shape, dtype, activation, "persistent")
                torch.manual_seed(rows)
                base, _, _ = gated_backward_given_saved(rows, shape, dtype, activation, "layers")
                what = f"gated {shape} {activation} M={rows} {dtype}"
                assert ran, f"{what}: the backward kernel did not run"
                for i, (g, w, b) in enumerate(zip(got, want, base)):
                    err, bound = rel_err(g, w), max(SAME_SAVED_TOL[dtype], 3 * rel_err(b, w))
                    assert err <= bound, f"{what} gradient {i}: {err:.3e} > {bound:.3e}"


def check_gated(rows, shape, dtype, activation, what, lead=(), must_run=True):
    """Forward and every gradient of ops.gated_mlp against the float64 autograd of the reference; whether the
    backward kernel ran is `must_run`."""
    x, wg, wu, wd = gated_params(rows, *shape, dtype, grad=True, lead=lead)
    out = ops.gated_mlp(x, wg, wu, wd, activation)
    p64 = as64(x, wg, wu, wd)
    expected = ref.gated_mlp(*p64, activation)
    assert_close(out, expected, dtype, f"{what}: forward")
    check_grads(out, (x, wg, wu, wd), expected, p64, dtype, what)
    upstream = torch.randn_like(out)
    ran = ran_backward_kernel(lambda: ops.gated_mlp(x, wg, wu, wd, activation).backward(upstream))
    assert ran == must_run, f"{what}: the backward kernel {'did not run' if must_run else 'ran'}"


@pytest.mark.parametrize("activation", ("gelu_tanh", "silu"))
def test_gated_public_op_backward(activation):
    """Through the public op and its autograd, leading batch dims included; the eager table takes the kernel at
    16 rows with nothing forced."""
    d = torch.bfloat16
    check_gated(16, (768, 3072, 768), d, activation, f"gated {activation} (table)")
    with forced("chain_backward", "persistent"):
        check_gated(1, (768, 3072, 768), torch.float16, activation, f"gated {activation} M=1 fp16")
        check_gated(3, (96, 208, 48), d, activation, f"gated {activation} lead (2,)", lead=(2,))


def test_gated_backward_refuses_what_it_cannot_take_and_the_layers_are_right():
    """Each gated call the kernel must not take runs the cuBLASLt path, with correct gradients: 17 rows of the real
    shape (its 384 down-projection tiles need more than two per program at two row tiles), fp32, I = 200 (not a
    multiple of 16), and gradients flowing into the registered op's h."""
    d = torch.bfloat16
    with forced("chain_backward", "persistent"):
        check_gated(17, (768, 3072, 768), d, "gelu_tanh", "refused: 17 rows", must_run=False)
        check_gated(8, (96, 208, 48), torch.float32, "silu", "refused: fp32", must_run=False)
        check_gated(8, (96, 200, 48), d, "silu", "refused: I = 200", must_run=False)
        x, wg, wu, wd = gated_params(8, 96, 208, 48, d, grad=True)
        y, h, _ = NS.cuda_gated_mlp(x, wg, wu, wd, "silu")

        def loss(y, h):
            return (y.float() * 2).sum() + (h.float() ** 2).sum()

        got = torch.autograd.grad(loss(y, h), (x, wg, wu, wd))
        p64 = as64(x, wg, wu, wd)
        g, u = p64[0] @ p64[1].T, p64[0] @ p64[2].T
        h64 = torch.nn.functional.silu(g) * u
        want = torch.autograd.grad(loss(h64 @ p64[3].T, h64), p64)
        for i, (a, b) in enumerate(zip(got, want)):
            assert_close(a, b, d, f"gated hidden-output gradients, input {i}")

        def step():
            return torch.autograd.grad(loss(*NS.cuda_gated_mlp(x, wg, wu, wd, "silu")[:2]), x)

        assert not ran_backward_kernel(step), "the backward kernel ran with a gradient flowing into h"


def test_gated_backward_inside_a_user_cuda_graph():
    """Forward + backward of the gated op captured once, replayed on new inputs and upstream gradients."""
    d = torch.bfloat16
    with forced("chain_backward", "persistent"):
        x, wg, wu, wd = gated_params(16, 768, 3072, 768, d, grad=True)
        params = (x, wg, wu, wd)
        upstream = torch.randn(16, 768, dtype=d, device=DEV)
        graph, grads_out = captured_step(
            lambda: ops.gated_mlp(x, wg, wu, wd, "gelu_tanh").backward(upstream), params
        )
        for _ in replayed(graph, x, upstream):
            p64 = as64(*params)
            want = torch.autograd.grad(ref.gated_mlp(*p64, "gelu_tanh"), p64, upstream.double())
            for i, (g, w) in enumerate(zip(grads_out, want)):
                assert_close(g, w, d, f"replayed gated grad {i}")
