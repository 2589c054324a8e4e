"""`kernel-hub bench REPO --version N`: time every variant that fits this machine against eager and record it.

Loads each accepted variant as `get_kernel` would (trust, signature, digests), times it, the compiled
fallback and eager PyTorch (the package's reference) on the kernel's standard workloads
(`registry/client/workloads.py`), prints a table and commits the record to the repo's `compat` branch
(`speed/<commit>/<fingerprint>.json`; needs a write token), where `get_kernel` orders variants by it,
`kernel-hub matrix` shows the expected speed-up per cell and the hub page charts it. Meant for a GPU;
`--backend cpu` times the CPU builds on small shapes (CI). `--preset llama-3-8b` (repeatable) adds that model's
MLP shapes at 1 / 16 / 512 rows (CPU: 1 / 16) as workloads `<preset> M=<rows>`: recorded and charted like the rest.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from .output import output_arg

log = logging.getLogger(__name__)


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "bench",
        help="time every variant of a version on this GPU against eager; record it on the `compat` branch",
        description=__doc__.split("\n\n")[0],
    )
    p.add_argument("repo", help="kernel repo id, e.g. org/fused-mlp")
    p.add_argument("--version", type=int, required=True, help="N (branch vN)")
    p.add_argument("--backend", choices=["cpu"], help="time the CPU builds on the CPU (small shapes)")
    p.add_argument(
        "--no-compile",
        action="store_true",
        help="leave out the torch.compile fallback (compiling takes seconds)",
    )
    p.add_argument("--rounds", type=int, help="timed batches per implementation and workload")
    p.add_argument(
        "--preset",
        action="append",
        default=[],
        metavar="NAME",
        help="also time this model's MLP shapes (registry/spec/presets.py, e.g. llama-3-8b), or a shape "
        "OP:DIMS:ACTIVATION[+bias] (e.g. gated_mlp:5120x14336:silu); repeatable",
    )
    output_arg(p, "also write the record here, after every workload")
    p.add_argument("--no-record", action="store_true", help="do not commit the record to the hub")
    p.add_argument("--trust-remote-code", action="store_true", help="time a repo whose org is not trusted")
    p.add_argument("--endpoint", help="hub URL (default: $HF_ENDPOINT, else the Hugging Face Hub)")
    p.add_argument(
        "--token", help="token (default: $HF_TOKEN or the saved token); recording needs write access"
    )
    p.set_defaults(func=run)


def _write(path: Path | None, record) -> None:
    if path is not None:
        path.write_text(json.dumps(record.to_json(), indent=2, sort_keys=True) + "\n")


def table(record) -> str:
    """Markdown: µs per call of every implementation per workload, speed-up over eager in brackets."""
    from registry.client.speed_records import BASELINE

    impls = record.implementations()
    out = ["| workload | " + " | ".join(impls) + " |", "|---|" + "---|" * len(impls)]
    for w in record.workloads():
        base = record.us(BASELINE, w)
        cells = []
        for i in impls:
            us = record.us(i, w)
            if us is None:
                cells.append("failed")
            else:
                cells.append(f"{us:.1f}" + (f" (×{base / us:.2f})" if base and i != BASELINE else ""))
        out.append(f"| {w} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def run(args: argparse.Namespace) -> int:
    from registry.client.bench import bench_version
    from registry.client.speed_records import BASELINE, FALLBACK_COMPILE, recorded_order
    from registry.errors import UsageError
    from registry.spec import presets

    for name in args.preset:  # a typo is the command line's: one line, exit 2, before anything loads
        try:
            presets.get(name)
        except ValueError as e:
            raise UsageError(f"--preset: {e}") from None

    record = bench_version(
        args.repo,
        args.version,
        backend=args.backend,
        compile_fallback=not args.no_compile,
        rounds=args.rounds,
        endpoint=args.endpoint,
        token=args.token,
        trust_remote_code=args.trust_remote_code,
        progress=lambda r: _write(args.output, r),
        presets=args.preset,
    )
    _write(args.output, record)
    sys.stdout.write(table(record))
    variants = [i for i in record.implementations() if i not in (BASELINE, FALLBACK_COMPILE)]
    order, speedups = recorded_order(variants, [record], record.env)
    for v in variants:
        why = record.slower_than_eager(v) if v in speedups else "failed to load or run"
        up = f"×{speedups[v]:.2f} vs eager" if v in speedups else "no timing"
        log.info("kernel-hub bench: %s %s%s", v, up, f" ({why})" if why else "")
    served = next((v for v in order if v in speedups and record.slower_than_eager(v) is None), None)
    log.info("kernel-hub bench: get_kernel here would serve %s", served or "the fallback")
    if not args.no_record:
        from registry.matrix.store import write_speed_record
        from registry.wire import HubClient

        url = write_speed_record(HubClient.at(args.endpoint, args.token), args.repo, record)
        log.info("kernel-hub bench: recorded %s", url)
    return 0
