"""The persistent chain kernel (csrc/chain.h: a whole small-batch `mlp` / `gated_mlp` forward in one
cooperative launch) on a GPU: against float64 in bf16 and fp16 at every row count it takes (1-64, across its
16-row tiles), biases on some layers, every activation, the gated training forward's saved (g, u) and its
gradients, capture inside a user's CUDA graph, and the calls it must refuse (65 rows, fp32, 9 layers, dims
that are not multiples of 8/16, a misaligned input, weights too large for shared memory), which must still be
right. A profiler trace tells whether the kernel really ran. Runs against a built variant, as
tests/cuda/test_cuda_gpu.py."""

import itertools
import sys
from functools import partial
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parents[1] / "kernels"))
sys.path.insert(0, str(Path(__file__).parent))
import fused_mlp.reference as ref
from kernel_numerics import ACTIVATIONS, as64, assert_close, randn
from test_cuda_gpu import NS, OK, WHY, check_grads, forced, launched

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not OK, reason=f"CUDA backend unavailable: {WHY}")]
if OK:
    from fused_mlp.cuda import ops
DEV = "cuda"


def ran_chain(call) -> bool:
    """Whether `call` launched the persistent chain kernel."""
    return launched(call, "chain_kernel")


def mlp_case(rows, dims, dtype, activation, bias_on, lead=()):
    x = randn(*lead, rows, dims[0], dtype=dtype, device=DEV)
    ws = [randn(o, i, dtype=dtype, device=DEV, scale=i**-0.5) for i, o in itertools.pairwise(dims)]
    bs = [randn(o, dtype=dtype, device=DEV) if on else None for o, on in zip(dims[1:], bias_on)]
    p64 = as64(x, *ws)
    b64 = [None if b is None else b.double() for b in bs]
    return x, ws, bs, ref.mlp(p64[0], p64[1:], b64, activation)


def gated_case(rows, hidden, inter, dtype, lead=(), grad=False):
    x = randn(*lead, rows, hidden, dtype=dtype, device=DEV, grad=grad)
    wg, wu = (randn(inter, hidden, dtype=dtype, device=DEV, scale=hidden**-0.5, grad=grad) for _ in range(2))
    wd = randn(hidden, inter, dtype=dtype, device=DEV, scale=inter**-0.5, grad=grad)
    return x, wg, wu, wd


@pytest.mark.parametrize("dtype", (torch.bfloat16, torch.float16))
def test_mlp_chain_matches_float64(dtype):
    """Every row count across the kernel's 16-row tiles, real and odd layer widths, biases on some layers."""
    with forced("chain", "persistent"), torch.no_grad():
        for rows in (1, 5, 16, 17, 32, 33, 48, 64):
            for dims, activation, bias_on in (
                ((1024, 1024, 1024, 1024), "relu", (True, True, True)),
                ((64, 208, 48, 16), "gelu_tanh", (True, False, True)),
                ((768, 3072, 768), "silu", (False, False)),
            ):
                x, ws, bs, expected = mlp_case(rows, dims, dtype, activation, bias_on)
                call = partial(ops.mlp, x, ws, bs, activation)
                assert_close(call(), expected, dtype, f"chain mlp {dims} M={rows} {activation}")
                if rows in (1, 16):  # 17-64 rows take at most 264 / 132 tiles of 8 columns per layer
                    assert ran_chain(call), f"the chain kernel did not run: {dims} M={rows}"


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_mlp_chain_every_activation_and_leading_dims(activation):
    d = torch.bfloat16
    with forced("chain", "persistent"), torch.no_grad():
        x, ws, bs, expected = mlp_case(7, (128, 256, 128), d, activation, (True, True), lead=(2,))
        assert_close(ops.mlp(x, ws, bs, activation), expected, d, f"chain mlp {activation} [2, 7, 128]")
        x, wg, wu, wd = gated_case(3, 128, 256, d, lead=(2, 2))
        expected = ref.gated_mlp(*as64(x, wg, wu, wd), activation)
        assert_close(ops.gated_mlp(x, wg, wu, wd, activation), expected, d, f"chain gated {activation}")


@pytest.mark.parametrize("dtype", (torch.bfloat16, torch.float16))
def test_gated_chain_matches_float64(dtype):
    with forced("chain", "persistent"), torch.no_grad():
        for rows in (1, 16, 31, 64):
            for hidden, inter in ((768, 3072), (64, 208), (2048, 512)):
                x, wg, wu, wd = gated_case(rows, hidden, inter, dtype)
                call = partial(ops.gated_mlp, x, wg, wu, wd, "gelu_tanh")
                expected = ref.gated_mlp(*as64(x, wg, wu, wd), "gelu_tanh")
                assert_close(call(), expected, dtype, f"chain gated {hidden}x{inter} M={rows}")
                if rows == 16:
                    assert ran_chain(call), f"the chain kernel did not run: gated {hidden}x{inter} M={rows}"


@pytest.mark.parametrize("dtype", (torch.bfloat16, torch.float16))
def test_gated_chain_training_saves_g_u_and_backward_matches(dtype):
    """The training forward in the chain kernel stores (g, u) and h from its epilogue; backward reads them."""
    with forced("chain", "persistent"):
        x, wg, wu, wd = gated_case(12, 256, 512, dtype, grad=True)
        _, h, gu = NS.cuda_gated_mlp_train(x.detach(), wg.detach(), wu.detach(), wd.detach(), "silu")
        assert ran_chain(
            lambda: NS.cuda_gated_mlp_train(x.detach(), wg.detach(), wu.detach(), wd.detach(), "silu")
        )
        g64, u64 = (x.double() @ w.double().T for w in (wg, wu))
        assert_close(gu[0], g64, dtype, "saved g")
        assert_close(gu[1], u64, dtype, "saved u")
        assert_close(h, torch.nn.functional.silu(g64) * u64, dtype, "saved h")
        p64 = as64(x, wg, wu, wd)
        expected = ref.gated_mlp(*p64, "silu")
        out = ops.gated_mlp(x, wg, wu, wd, "silu")
        assert_close(out, expected, dtype, "chain gated training forward")
        check_grads(out, (x, wg, wu, wd), expected, p64, dtype, "chain gated training")
        x2, ws, bs, expected = mlp_case(9, (128, 256, 64), dtype, "gelu", (True, True))
        ws = [w.requires_grad_() for w in ws]
        out = ops.mlp(x2.requires_grad_(), ws, bs, "gelu")
        assert_close(out, expected, dtype, "chain mlp training forward")


def test_chain_refuses_what_it_cannot_take_and_the_layers_are_right():
    """Each call the kernel must not take runs the layers one by one, with correct results."""
    d = torch.bfloat16
    with forced("chain", "persistent"), torch.no_grad():
        cases = {
            "65 rows": mlp_case(65, (128, 128, 128), d, "relu", (True, True)),
            "fp32": mlp_case(16, (128, 128, 128), torch.float32, "relu", (True, True)),
            "9 layers": mlp_case(16, (64,) * 10, d, "relu", (True,) * 9),
            "out dim 60": mlp_case(16, (128, 60, 128), d, "relu", (True, True)),
            "in dim 72": mlp_case(16, (72, 128, 128), d, "relu", (True, True)),
        }
        for what, (x, ws, bs, expected) in cases.items():
            call = partial(ops.mlp, x, ws, bs, "relu")
            assert_close(call(), expected, x.dtype, f"refused chain: {what}")
            assert not ran_chain(call), f"the chain kernel ran although it must refuse: {what}"
        x = randn(16 * 128 + 1, dtype=d, device=DEV)[1:].view(16, 128)  # 2-byte aligned: refused
        _, ws, bs, _ = mlp_case(16, (128, 128, 128), d, "relu", (True, True))
        expected = ref.mlp(x.double(), [w.double() for w in ws], [b.double() for b in bs], "relu")
        assert_close(ops.mlp(x, ws, bs, "relu"), expected, d, "refused chain: misaligned input")
        assert not ran_chain(lambda: ops.mlp(x, ws, bs, "relu"))
        x, wg, wu, wd = gated_case(16, 4096, 8192, d)  # 2 x 64 MB + 64 MB of weights: no shared-memory slices
        expected = ref.gated_mlp(*as64(x, wg, wu, wd), "silu")
        assert_close(ops.gated_mlp(x, wg, wu, wd, "silu"), expected, d, "refused chain: weights too large")
        assert not ran_chain(lambda: ops.gated_mlp(x, wg, wu, wd, "silu"))


def test_chain_inside_a_user_cuda_graph():
    """Captured once, replayed on new inputs written into the captured buffers."""
    d = torch.bfloat16
    with forced("chain", "persistent"), torch.no_grad():
        x, ws, bs, _ = mlp_case(16, (1024, 1024, 1024, 1024), d, "relu", (True, True, True))
        xg, wg, wu, wd = gated_case(16, 768, 3072, d)
        ops.mlp(x, ws, bs, "relu"), ops.gated_mlp(xg, wg, wu, wd, "gelu_tanh")  # warm-up outside capture
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            y = ops.mlp(x, ws, bs, "relu")
            yg = ops.gated_mlp(xg, wg, wu, wd, "gelu_tanh")
        for _ in range(3):
            x.copy_(torch.randn_like(x))
            xg.copy_(torch.randn_like(xg))
            graph.replay()
            torch.cuda.synchronize()
            want = ref.mlp(x.double(), [w.double() for w in ws], [b.double() for b in bs], "relu")
            assert_close(y, want, d, "chain mlp replayed from a user graph")
            assert_close(yg, ref.gated_mlp(*as64(xg, wg, wu, wd), "gelu_tanh"), d, "chain gated replayed")


@pytest.mark.parametrize("dtype", (torch.bfloat16, torch.float16))
def test_chain_hands_non_finite_values_between_layers(dtype):
    """Non-finite inputs (a NaN with every bit set, a NaN, an inf) flow through every layer's hand-over as NaN
    in their rows only, and every other row stays right (a handover that used the all-ones NaN as a "not written
    yet" mark would wait forever or mix rows; session 27 measured one)."""
    with forced("chain", "persistent"), torch.no_grad():
        x, ws, bs, expected = mlp_case(16, (256, 512, 256, 128), dtype, "gelu", (True, True, True))
        xg, wg, wu, wd = gated_case(16, 256, 512, dtype)
        expected_g = ref.gated_mlp(*as64(xg, wg, wu, wd), "gelu")
        for t in (x, xg):
            t.view(torch.int16)[3, 7] = -1  # 0xFFFF
            t[5, 0], t[9, 100] = float("nan"), float("inf")
        bad = [3, 5, 9]
        good = [r for r in range(16) if r not in bad]
        for name, out, want in (
            ("mlp", ops.mlp(x, ws, bs, "gelu"), expected),
            ("gated", ops.gated_mlp(xg, wg, wu, wd, "gelu"), expected_g),
        ):
            torch.cuda.synchronize()
            assert torch.isnan(out[bad]).all(), f"chain {name}: a non-finite input row is not NaN throughout"
            assert_close(out[good], want[good], dtype, f"chain {name}: finite rows beside non-finite ones")
        assert ran_chain(lambda: ops.mlp(x, ws, bs, "gelu"))
