"""Which Hopper gate/up forms (hopper.tma_gate_up_kernel configs) give correct numbers on this GPU, and their
time at 8192 rows: the diagnostic that found the warp-specialized form writing NaN on the H200
(bench/RESULTS.md, integration run 2026-12-03). Runs kernel_src's JIT (a kernel check, not what users load).

    python bench/gate_up_forms.py          (sm_90a GPU; bf16, gate|up 3072 x 768, gelu_tanh)
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "kernel_src"))
import fused_mlp.reference as ref
from fused_mlp.triton import configs, forward

T = configs.TmaConfig
FORMS = {
    "ws 128x64 w4 s4": T(128, 64, 64, 8, 4, 4, warp_spec=True),
    "ws 128x128 w4 s4": T(128, 128, 64, 8, 4, 4, warp_spec=True),
    "plain 128x64 w4 s4": T(128, 64, 64, 8, 4, 4),
    "plain 128x64 w8 s4": T(128, 64, 64, 8, 8, 4),
    "plain 128x128 w8 s3 (shipped)": T(128, 128, 64, 8, 8, 3),
    "split 128x128 w8 s3": T(128, 128, 64, 8, 8, 3, epi_split=True),
}
N, K = 3072, 768


def _rel(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.double() - want).norm() / want.norm())


def _us(fn, reps: int = 50) -> float:
    for _ in range(5):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps * 1e3


def main() -> int:
    torch.manual_seed(0)
    for M in (300, 1024, 8192):
        for store in (False, True):
            x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
            wg, wu = ((torch.randn(N, K, device="cuda") * K**-0.5).to(torch.bfloat16) for _ in range(2))
            g64, u64 = x.double() @ wg.double().T, x.double() @ wu.double().T
            want = ref.act_and_mul(g64, u64, "gelu_tanh")
            for name, cfg in FORMS.items():
                h = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
                gu = (
                    torch.full((2, M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
                    if store
                    else None
                )
                try:
                    forward.gate_up_rows(x, wg, wu, "gelu_tanh", h, cfg, gu=gu)
                    torch.cuda.synchronize()
                    msg = f"rel {_rel(h, want):.2e} nan {int(h.isnan().sum())}"
                    if store:
                        msg += f" gu rel {_rel(gu, torch.stack([g64, u64])):.2e}"
                    if M == 8192 and not store:
                        call = (x, wg, wu, "gelu_tanh", h, cfg)
                        msg += f" {_us(lambda call=call: forward.gate_up_rows(*call)):.1f} us"
                except Exception as e:  # noqa: BLE001 - a form that fails to compile or fit is reported, the sweep goes on
                    msg = f"ERROR {type(e).__name__}: {str(e)[:160]}"
                print(f"M={M} store={store} {name}: {msg}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
