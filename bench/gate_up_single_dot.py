"""Can the gated MLP's gate/up GEMM run as ONE wgmma chain per tile (accumulator [BM, 2*BH]: gate columns
then up columns) instead of two dots into two accumulators? Compares, at the gated workload's shapes
(H=768, I=3072, bf16, gelu_tanh), GPU µs per call replayed from a CUDA graph and the error vs float64:

- cuBLAS: one [M, 2I] GEMM (the floor of any split form) and two [M, I] GEMMs (what `split` launches);
- hopper.tma_gate_up_kernel (one dot per K step over the 3D weight view) in several configs, with and
  without storing (g, u) (training forward); it replaced two dots into two accumulators (178.4 µs at
  8192 rows for the best correct config, bench/RESULTS.md);
- `packed`: the weights packed per call into [gate block | up block] row pairs of BH rows, one 2D
  descriptor, one dot; the packing copy is timed on its own;
- `3d`: the same idea written standalone here: no packing, one 3D descriptor over (w_gate, w_up) with the distance between the two tensors as
  its outer stride, loading [2, BH, BK] and reshaping it to [2*BH, BK] for one dot.

    python bench/gate_up_single_dot.py [--out FILE.json]     (sm_90a GPU; runs kernel_src's JIT)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "kernel_src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import fused_mlp.reference as ref
import harness
from fused_mlp.triton import configs, forward
from fused_mlp.triton.activations import activate
from fused_mlp.triton.tiles import grouped_tile

I, H = 3072, 768
ACT = 3  # gelu_tanh


@triton.jit
def _one_dot_kernel(
    x_ptr, w_ptr, h_ptr, M, N, K, ldx, ldw, ldh, delta,
    THREE_D: tl.constexpr, SELECT: tl.constexpr, ACT: tl.constexpr, BM: tl.constexpr, BH: tl.constexpr, BK: tl.constexpr,
    GROUP_M: tl.constexpr,
):  # fmt: skip
    x_desc = tl.make_tensor_descriptor(x_ptr, [M, K], [ldx, 1], [BM, BK])
    if THREE_D:  # plane 0 = w_gate, plane 1 = w_up, `delta` elements apart
        w_desc = tl.make_tensor_descriptor(w_ptr, [2, N, K], [delta, ldw, 1], [2, BH, BK])
    else:  # packed: row block 2j = gate rows [j*BH, (j+1)*BH), block 2j+1 the same up rows
        w_desc = tl.make_tensor_descriptor(w_ptr, [2 * tl.cdiv(N, BH) * BH, K], [ldw, 1], [2 * BH, BK])
    h_desc = tl.make_tensor_descriptor(h_ptr, [M, N], [ldh, 1], [BM, BH])
    num_pid_m = tl.cdiv(M, BM)
    num_pid_n = tl.cdiv(N, BH)
    num_tiles = num_pid_m * num_pid_n
    k_tiles = tl.cdiv(K, BK)
    step = tl.num_programs(0)
    tile_c = tl.program_id(0) - step
    for tile in tl.range(tl.program_id(0), num_tiles, step, flatten=True):
        pid_m, pid_n = grouped_tile(tile, num_pid_m, num_pid_n, GROUP_M)
        off_m = pid_m * BM
        acc = tl.zeros((BM, 2 * BH), dtype=tl.float32)
        for ki in tl.range(k_tiles):
            off_k = ki * BK
            if THREE_D:
                b = w_desc.load([0, pid_n * BH, off_k]).reshape(2 * BH, BK)
            else:
                b = w_desc.load([pid_n * 2 * BH, off_k])
            acc = tl.dot(x_desc.load([off_m, off_k]), b.T, acc)
        tile_c += step
        pid_m, pid_n = grouped_tile(tile_c, num_pid_m, num_pid_n, GROUP_M)
        g, u = acc.reshape(BM, 2, BH).permute(0, 2, 1).split()
        if SELECT:  # what hopper.tma_gate_up_kernel does to allow w_up below w_gate: its cost, measured
            up_first = delta < 0
            g, u = tl.where(up_first, u, g), tl.where(up_first, g, u)
        h_desc.store([pid_m * BM, pid_n * BH], (activate(g, ACT) * u).to(h_desc.dtype))


def _alloc(size: int, align: int, stream) -> torch.Tensor:
    return torch.empty(size, device="cuda", dtype=torch.int8)


def _pack(wg: torch.Tensor, wu: torch.Tensor, bh: int, out: torch.Tensor) -> torch.Tensor:
    n, k = wg.shape
    nb = -(-n // bh)
    view = out.view(nb, 2, bh, k)
    full = n // bh
    view[:full, 0].copy_(wg[: full * bh].view(full, bh, k))
    view[:full, 1].copy_(wu[: full * bh].view(full, bh, k))
    if full < nb:
        view[full, 0, : n - full * bh].copy_(wg[full * bh :])
        view[full, 1, : n - full * bh].copy_(wu[full * bh :])
    return out


def one_dot(x, wg, wu, h, *, three_d, bm, bh, bk, warps, stages, packed=None, select=False, sms=132):
    m, k = x.shape
    n = wg.shape[0]
    if three_d:
        delta = wu.data_ptr() - wg.data_ptr()
        assert delta > 0 and delta % 16 == 0, "the 3D form needs w_up after w_gate, 16-byte apart multiples"
        base, ldw, delta = wg, wg.stride(0), delta // wg.element_size()
    else:
        base, ldw, delta = packed, packed.stride(0), 0
    tiles = -(-m // bm) * -(-n // bh)
    _one_dot_kernel[(min(sms, tiles),)](
        x, base, h, m, n, k, x.stride(0), ldw, h.stride(0), delta,
        THREE_D=three_d, SELECT=select, ACT=ACT, BM=bm, BH=bh, BK=bk, GROUP_M=8, num_warps=warps, num_stages=stages,
    )  # fmt: skip


# hopper.tma_gate_up_kernel (the kernel users get, JIT here): BM, BN (per weight), BK, GROUP_M, warps, stages
_T = configs.TmaConfig
KERNEL_CONFIGS = (
    _T(128, 128, 64, 8, 8, 3), _T(128, 128, 64, 8, 8, 4), _T(128, 128, 64, 8, 8, 3, epi_split=True),
    _T(128, 64, 64, 8, 8, 4), _T(128, 64, 64, 8, 4, 4), _T(64, 128, 64, 8, 4, 4),
)  # fmt: skip


def parse_config(text: str) -> configs.TmaConfig:
    """`BMxBNxBK/wW/sS[/gG][/split]`, e.g. 128x64x128/w8/s3/g4, into a TmaConfig (BN: columns per weight)."""
    parts = text.split("/")
    bm, bn, bk = (int(v) for v in parts[0].split("x"))
    opts = {p[0]: p[1:] for p in parts[1:] if p != "split"}
    return _T(bm, bn, bk, int(opts.get("g", 8)), int(opts["w"]), int(opts["s"]), epi_split="split" in parts)


def sweep(m: int, forms: list[dict], kernel_configs: tuple, results: list[dict]) -> None:
    """Every form at `m` rows: GPU µs in a graph, and the relative error vs float64 of those that write h."""
    x = torch.randn(m, H, device="cuda", dtype=torch.bfloat16)
    w = (torch.randn(2, I, H, device="cuda") * H**-0.5).to(torch.bfloat16)  # w_up right after w_gate
    wg, wu = w[0], w[1]
    want = ref.act_and_mul(x.double() @ wg.double().T, x.double() @ wu.double().T, "gelu_tanh")
    eager = ref.act_and_mul(x @ wg.T, x @ wu.T, "gelu_tanh")
    eager_err = float((eager.double() - want).norm() / want.norm())
    h = torch.empty(m, I, device="cuda", dtype=torch.bfloat16)

    def row(name, fn, checked=False, **extra):
        try:
            r = {"name": name, "M": m, "us": round(harness.gpu_us(fn, repeat=10, replays=15), 2), **extra}
            if checked:
                h.fill_(float("nan"))
                fn()
                torch.cuda.synchronize()
                r |= {"rel_err": float((h.double() - want).norm() / want.norm()), "eager_rel_err": eager_err}
        except Exception as e:  # noqa: BLE001 - a form that fails to compile is reported, the sweep goes on
            r = {"name": name, "M": m, "error": f"{type(e).__name__}: {str(e)[:200]}", **extra}
        results.append(r)
        print(json.dumps(r), flush=True)

    wcat = w.view(2 * I, H)
    gu = torch.empty(m, 2 * I, device="cuda", dtype=torch.bfloat16)
    g1, u1 = (torch.empty(m, I, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    row("cublas one [M,2I] GEMM", lambda: torch.mm(x, wcat.T, out=gu))
    row("cublas two [M,I] GEMMs", lambda: (torch.mm(x, wg.T, out=g1), torch.mm(x, wu.T, out=u1)))
    gu2 = torch.empty(2, m, I, device="cuda", dtype=torch.bfloat16)
    for cfg in kernel_configs:
        name = (
            f"hopper.tma_gate_up_kernel {cfg.BM}x{cfg.BN}(x2)x{cfg.BK} g{cfg.GROUP_M} w{cfg.num_warps} "
            f"s{cfg.num_stages}{' split' if cfg.epi_split else ''}"
        )
        row(name, lambda cfg=cfg: forward.gate_up_rows(x, wg, wu, "gelu_tanh", h, cfg), True)
        row(
            name + " +store g,u",
            lambda cfg=cfg: forward.gate_up_rows(x, wg, wu, "gelu_tanh", h, cfg, gu=gu2),
            True,
        )
    for f in forms:
        name = f"{'3d' if f['three_d'] else 'packed'} {f['bm']}x{f['bh']}(x2) w{f['warps']} s{f['stages']}"
        name += " +select" if f.get("select") else ""
        packed = None
        if not f["three_d"]:
            packed = torch.empty(2 * -(-I // f["bh"]) * f["bh"], H, device="cuda", dtype=torch.bfloat16)
            _pack(wg, wu, f["bh"], packed)
            row(f"pack copy BH={f['bh']}", lambda f=f, p=packed: _pack(wg, wu, f["bh"], p))
        row(name, lambda f=f, p=packed: one_dot(x, wg, wu, h, packed=p, **f), True, **f)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--rows", default="1024,8192")
    ap.add_argument(
        "--quick", action="store_true", help="the kernel's two best configs and one standalone form"
    )
    ap.add_argument("--configs", default="", help="only these kernel configs (comma list, see parse_config)")
    args = ap.parse_args()
    triton.set_allocator(_alloc)
    torch.manual_seed(0)
    results: list[dict] = []
    forms = [
        {"three_d": three_d, "bm": bm, "bh": bh, "bk": 64, "warps": warps, "stages": stages}
        for three_d in (False, True)
        for bm, bh, warps, stages in (
            (128, 128, 8, 3), (128, 128, 8, 4), (128, 64, 8, 4), (128, 64, 4, 4), (64, 128, 4, 4), (128, 128, 4, 3),
        )
    ]  # fmt: skip
    kernel_configs = KERNEL_CONFIGS
    if args.quick:
        forms = [f for f in forms if f["three_d"] and f["bh"] == 128 and f["warps"] == 8 and f["stages"] == 3]
        forms.append({**forms[0], "select": True})
        kernel_configs = (KERNEL_CONFIGS[1], KERNEL_CONFIGS[3])
    if args.configs:
        forms, kernel_configs = [], tuple(parse_config(c) for c in args.configs.split(","))
    for m in (int(r) for r in args.rows.split(",")):
        sweep(m, forms, kernel_configs, results)
    if args.out:
        meta = {
            "device": torch.cuda.get_device_name(),
            "torch": torch.__version__,
            "triton": triton.__version__,
        }
        Path(args.out).write_text(json.dumps({**meta, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
