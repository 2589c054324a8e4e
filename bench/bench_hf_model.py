"""End to end in transformers: Llama-shaped models (random weights from a config) with their MLP blocks on our
kernels through the stock route (`registry.mlp_kernel_mapping` + `kernels.kernelize`, loaded from --hub),
beside the same model eager, under torch.compile and with Liger's `apply_liger_kernel_to_llama`, in one run.
Rows per model, bf16: decode (`generate`, static cache, batch 1 and 8, --new-tokens greedy tokens: tokens/s),
prefill (2048 tokens, batch 1 and 4, the last position's logits as generate's prefill: ms), one training step (seq
2048, batch 1 and 4: forward, backward, AdamW: ms and peak GB), the logits' error against a float64 copy (1B only),
the MLP blocks' share of a decode step (all its MLP blocks at the decode shape in one CUDA graph, over the step's
time). Ours gets `kernel_report`: each block's variant, path and speed-up at its shapes. Row "ours" runs every
block on our kernel; where the report finds a block slower than its own forward, row "ours, report" runs what
`kernel_report` leaves the user (those blocks on their own forward at the row counts where ours is slower).
Models: llama-3.2-1b (16 layers, H=2048, I=8192) and llama-3-8b's widths (H=4096, I=14336) in --layers-8b of
its 32 layers. Compile rows run last, while --deadline-s allows: each compiles for tens of seconds.

    python bench/bench_hf_model.py --hub URL --repo acme/fused-mlp [--json out.json] [--skip compile,liger]
"""

from __future__ import annotations

import copy
import gc
import sys
import time
import traceback
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness

from registry.spec import presets

MODELS = {"llama-3.2-1b": 16, "llama-3-8b": 32}  # preset -> the real model's layer count
SHAPE = {  # attention and vocabulary of the real models (the presets give the MLP widths)
    "llama-3.2-1b": {"num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64, "tie_word_embeddings": True},
    "llama-3-8b": {"num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "tie_word_embeddings": False},
}  # fmt: skip
PREFILL, TRAIN_SEQ = 2048, 2048
LIGER_PATCHED = ("apply_rotary_pos_emb", "LlamaRMSNorm", "LlamaMLP")  # module globals Liger replaces
DEVICE = "cuda"


def build(name: str, layers: int):
    import transformers

    hidden, inter = presets.get(name).widths
    cfg = transformers.LlamaConfig(
        vocab_size=128256, hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
        max_position_embeddings=8192, rope_theta=500000.0, **SHAPE[name],
    )  # fmt: skip
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    with torch.device(DEVICE):
        return transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16).eval()


def ids(batch: int, seq: int) -> torch.Tensor:
    return torch.randint(0, 128256, (batch, seq), device=DEVICE)


def decode(model, batch: int, new: int, compiled: bool) -> dict:
    """Tokens/s of greedy `generate` with a static cache (transformers compiles it unless told not to)."""
    prompt = ids(batch, 16)
    kw = {"do_sample": False, "cache_implementation": "static", "disable_compile": not compiled,
          "attention_mask": torch.ones_like(prompt), "pad_token_id": 0}  # fmt: skip
    warm = new if compiled else 8  # the compiled step is specialized to the static cache's length
    model.generate(prompt, max_new_tokens=warm, min_new_tokens=warm, **kw)  # allocates the cache, compiles
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = model.generate(prompt, max_new_tokens=new, min_new_tokens=new, **kw)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    assert out.shape == (batch, 16 + new), out.shape
    return {"tokens_per_s": round(batch * new / seconds, 1), "step_ms": round(seconds / new * 1e3, 3)}


def prefill(model, batch: int) -> dict:
    x = ids(batch, PREFILL)
    with torch.no_grad():
        us = harness.stream_us(lambda: model(x, logits_to_keep=1), iters=3, rounds=3)
    return {"ms": round(us / 1e3, 3)}


def train_step(model, batch: int) -> dict:
    """ms and peak GB of one step; the weights are put back after it, so every later row sees the same model."""
    saved = {k: v.to("cpu", copy=True) for k, v in model.state_dict().items()}
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    x = ids(batch, TRAIN_SEQ)

    def step():
        model(x, labels=x).loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    try:
        step()
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        us = harness.stream_us(step, iters=2, rounds=3)
        return {"ms": round(us / 1e3, 3), "peak_gb": round(torch.cuda.max_memory_allocated() / 1e9, 3)}
    finally:
        opt.state.clear()
        model.load_state_dict(saved)
        model.zero_grad(set_to_none=True)
        model.eval()
        gc.collect()
        torch.cuda.empty_cache()


def mlp_share(model, batch: int, step_ms: float) -> dict:
    """GPU µs of all MLP blocks at the decode shape (one graph), and their share of a decode step."""
    mlps = [layer.mlp for layer in model.model.layers]
    x = torch.randn(batch, 1, model.config.hidden_size, device=DEVICE, dtype=torch.bfloat16)

    def run():
        with torch.no_grad():
            for m in mlps:
                m(x)

    us = harness.gpu_us(run, repeat=1) or harness.stream_gpu_us(run)
    return {"mlp_us": round(us, 1), "mlp_share": round(us / (step_ms * 1e3), 4)}


def logits_error(model, ref64, probes) -> dict:
    """Mean and worst error of the logits over the probes; each layer's hidden-state error on the first."""
    with torch.no_grad():  # one forward per model and probe gives both the logits and the hidden states
        pairs = [(model(x, output_hidden_states=True), ref64(x, output_hidden_states=True)) for x in probes]
    errs = [harness.rel_err(a.logits.float(), b.logits) for a, b in pairs]
    hidden = [round(harness.rel_err(a.float(), b), 5) for a, b in zip(*(o.hidden_states for o in pairs[0]))]
    return {"rel_err": sum(errs) / len(errs), "rel_err_max": max(errs), "hidden_err": hidden}


class Run:
    """The rows measured so far (written out after each) and the time left."""

    def __init__(self, args):
        self.args, self.start = args, time.perf_counter()
        self.report = {"env": harness.environment(), "rows": [], "kernel_reports": {}, "errors": []}

    def left(self) -> float:
        return self.args.deadline_s - (time.perf_counter() - self.start)

    def row(self, model: str, impl: str, what: str, fn) -> dict | None:
        if self.left() <= 0:
            self.report["errors"].append(f"{model} {impl} {what}: skipped, past the deadline")
            return None
        try:
            result = fn()
        except Exception as e:  # noqa: BLE001 - one failed row must not lose the others
            traceback.print_exc()
            self.report["errors"].append(f"{model} {impl} {what}: {type(e).__name__}: {str(e)[:300]}")
            torch.cuda.empty_cache()
            return None
        self.report["rows"].append({"model": model, "impl": impl, "row": what, **result})
        print(f"{model:14} {impl:14} {what:18} {result}", flush=True)
        harness.write_json(self.args.json, self.report)
        return result


def measure(run: Run, name: str, model, impl: str, compiled: bool = False) -> None:
    new = run.args.new_tokens
    for batch in (1, 8):
        r = run.row(name, impl, f"decode b{batch}", lambda b=batch: decode(model, b, new, compiled))
        if r and not compiled:
            run.row(name, impl, f"mlp share b{batch}", lambda b=batch, r=r: mlp_share(model, b, r["step_ms"]))
    target = torch.compile(model) if compiled else model
    for batch in (1, 4):
        run.row(name, impl, f"prefill b{batch}", lambda b=batch: prefill(target, b))
    for batch in (1,) if compiled else (1, 4):  # a second batch would recompile the backward for minutes
        run.row(name, impl, f"train seq2048 b{batch}", lambda b=batch: train_step(target, b))


def kernelize_ours(model, repo: str, compiled: bool = False):
    """The user's route; TRAINING: the same model also runs the training step (kernels checks the backward)."""
    from kernels import Mode, kernelize, use_kernel_mapping

    from registry import kernel_report, mlp_kernel_mapping

    mode = Mode.TRAINING | Mode.TORCH_COMPILE if compiled else Mode.TRAINING
    with use_kernel_mapping(mlp_kernel_mapping(model, repo, version=1), inherit_mapping=False):
        kernelize(model, mode=mode, device=DEVICE)
    return kernel_report(model, restore=False)


def restore_own(model) -> None:
    for m in model.modules():
        m.__dict__.pop("forward", None)


def with_liger(model):
    """Liger applied to `model`; returns an undo for the module globals it replaces in modeling_llama."""
    from liger_kernel.transformers import apply_liger_kernel_to_llama
    from transformers.models.llama import modeling_llama

    saved = {k: getattr(modeling_llama, k) for k in LIGER_PATCHED}
    apply_liger_kernel_to_llama(model=model)
    return lambda: [setattr(modeling_llama, k, v) for k, v in saved.items()]


def one_model(run: Run, name: str, layers: int, repo: str) -> None:
    skip = run.args.skip
    model = build(name, layers)
    label = f"{name} {layers}L"
    ref64, probes = None, [ids(1, 128) for _ in range(4)]  # one seed's error said little: a mean over four
    if name == "llama-3.2-1b":
        ref64 = copy.deepcopy(model).double()
        run.row(label, "eager", "logits err", lambda: logits_error(model, ref64, probes))
    measure(run, label, model, "eager")
    try:
        report = kernelize_ours(model, repo)
    except Exception as e:  # noqa: BLE001 - eager's and Liger's rows still stand
        traceback.print_exc()
        run.report["errors"].append(f"{label} kernelize: {type(e).__name__}: {e}")
        report = None
    if report is not None:
        print(report, flush=True)
        run.report["kernel_reports"][label] = {"text": str(report), **report.to_dict()}
        if ref64 is not None:
            run.row(label, "ours", "logits err", lambda: logits_error(model, ref64, probes))
        measure(run, label, model, "ours")  # every block on our kernel
        if slower := report.restore_slower(model):  # what kernel_report's default gives the user
            run.report["kernel_reports"][label]["restored"] = slower
            measure(run, label, model, "ours, report")
    restore_own(model)
    undo = None
    if "liger" not in skip:
        try:
            undo = with_liger(model)
        except Exception as e:  # noqa: BLE001 - the other rows stand without Liger's
            run.report["errors"].append(f"{label} liger: {type(e).__name__}: {e}")
    if undo is not None:
        try:
            if ref64 is not None:
                run.row(label, "liger", "logits err", lambda: logits_error(model, ref64, probes))
            measure(run, label, model, "liger")
        finally:
            undo()


def compiled_rows(run: Run, repo: str) -> None:
    """torch.compile rows of the 1B model, eager then ours, while the deadline allows."""
    name, layers = "llama-3.2-1b", MODELS["llama-3.2-1b"]
    label = f"{name} {layers}L"
    model = build(name, layers)
    measure(run, label, model, "eager+compile", compiled=True)
    torch._dynamo.reset()
    run.report["kernel_reports"][f"{label} compile"] = kernelize_ours(model, repo, compiled=True).to_dict()
    measure(run, label, model, "ours+compile", compiled=True)


IMPLS = ("eager", "eager+compile", "ours", "ours, report", "ours+compile", "liger")
METRIC = {"decode": "tokens_per_s", "prefill": "ms", "train": "ms", "logits": "rel_err", "mlp": "mlp_share"}


def table(rows: list[dict]) -> str:
    """One markdown line per (model, row), one column per implementation (tokens/s, ms, error or share)."""
    cells: dict[tuple[str, str], dict[str, str]] = {}
    for r in rows:
        value = r.get(METRIC[r["row"].split()[0]])
        text = f"{value:.4g}" + (f" / {r['peak_gb']:.2f} GB" if "peak_gb" in r else "")
        cells.setdefault((r["model"], r["row"]), {})[r["impl"]] = text
    lines = ["| model | row | " + " | ".join(IMPLS) + " |", "|---|---|" + "---|" * len(IMPLS)]
    for (model, row), by in cells.items():
        lines.append(f"| {model} | {row} | " + " | ".join(by.get(i, "") for i in IMPLS) + " |")
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = harness.tool_parser(__doc__)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--layers-8b", type=int, default=16, help="layers of the llama-3-8b-shaped model")
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument("--deadline-s", type=float, default=300, help="skip rows after this many seconds")
    parser.add_argument("--skip", default="", help="comma-separated: liger, compile, plain (uncompiled)")
    args = parser.parse_args(argv)
    if not (args.hub and args.repo):
        parser.error("--hub and --repo: the blocks load through kernels from a hub (HF_ENDPOINT)")
    args.skip = set(filter(None, args.skip.split(",")))
    repo = args.repo[0].partition("=")[0]
    run = Run(args)
    for name in [] if "plain" in args.skip else args.models.split(","):
        layers = args.layers_8b if name == "llama-3-8b" else MODELS[name]
        try:
            one_model(run, name, layers, repo)
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            run.report["errors"].append(f"{name}: {type(e).__name__}: {e}")
        gc.collect()  # the model and its float64 copy go before the next one is built
        torch.cuda.empty_cache()
    if "compile" not in args.skip:
        try:
            compiled_rows(run, repo)
        except Exception as e:  # noqa: BLE001 - the rows so far still print
            traceback.print_exc()
            run.report["errors"].append(f"compile: {type(e).__name__}: {e}")
    harness.append_csv("hf_model", run.report["rows"], ("model", "row"), ("tokens_per_s", "ms", "peak_gb",
                       "rel_err", "mlp_us", "mlp_share"), args.csv)  # fmt: skip
    harness.write_json(args.json, run.report)
    print(table(run.report["rows"]))
    for e in run.report["errors"]:
        print("ERROR", e)


if __name__ == "__main__":
    main()
