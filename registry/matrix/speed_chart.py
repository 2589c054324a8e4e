"""The hub page's speed chart: speed-up over eager per workload and implementation, from `kernel-hub bench` records.

Pure HTML + inline SVG (no script, no external asset): one chart per record (machine), a group of
horizontal bars per workload, one bar per variant and for the compiled fallback, a rule at 1× (eager),
and the raw µs in a table under it.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from registry.client.speed_records import BASELINE, SpeedRecord

COLORS = ("#3b6fd8", "#d8843b", "#3ba776", "#a63bd8", "#d83b5b", "#6b7280")
BAR, GAP, LABEL_W, PLOT_W = 14, 10, 290, 360

_CSS = """
.kh-speed{font:14px/1.4 system-ui,sans-serif;margin:1em 0}
.kh-speed svg text{font:12px system-ui,sans-serif}.kh-speed .note{color:#555;font-size:12px}
.kh-speed table{border-collapse:collapse}.kh-speed th,.kh-speed td{border:1px solid #ccd;padding:2px 6px}
.kh-speed td.num{text-align:right;font-variant-numeric:tabular-nums}
"""


def _x(speedup: float, top: float) -> float:
    """Horizontal position of a bar's end: 0× at the label column's edge, `top` at the plot's right edge."""
    return LABEL_W + PLOT_W * speedup / top


def _chart(record: SpeedRecord) -> str:
    e = html.escape
    impls = [i for i in record.implementations() if i != BASELINE]
    color = {i: COLORS[n % len(COLORS)] for n, i in enumerate(impls)}
    workloads = record.workloads()
    ups = [s for i in impls for s in record.speedups(i).values()]
    top = max([1.5, *ups]) * 1.1
    group = len(impls) * BAR + GAP
    height = len(workloads) * group + 40
    label = e(f"speed-up over eager per workload on {record.device}")
    parts = [f'<svg role="img" width="{LABEL_W + PLOT_W + 80}" height="{height}" aria-label="{label}">']
    for n, w in enumerate(workloads):
        y0 = 10 + n * group
        parts.append(f'<text x="{LABEL_W - 6}" y="{y0 + group / 2}" text-anchor="end">{e(w)}</text>')
        for k, impl in enumerate(impls):
            y = y0 + k * BAR
            base, mine = record.us(BASELINE, w), record.us(impl, w)
            if base and mine:
                s = base / mine
                parts.append(
                    f'<rect x="{LABEL_W}" y="{y}" width="{_x(s, top) - LABEL_W:.1f}" height="{BAR - 2}" '
                    f'fill="{color[impl]}"><title>{e(impl)}: {mine:.1f} µs vs eager {base:.1f} µs</title></rect>'
                    f'<text x="{_x(s, top) + 4:.1f}" y="{y + BAR - 4}">×{s:.2f}</text>'
                )
            else:
                parts.append(f'<text x="{LABEL_W + 4}" y="{y + BAR - 4}">{e(impl)}: failed</text>')
    one = _x(1.0, top)
    parts.append(
        f'<line x1="{one:.1f}" x2="{one:.1f}" y1="4" y2="{height - 28}" stroke="#111" stroke-dasharray="3 3"/>'
        f'<text x="{one:.1f}" y="{height - 14}" text-anchor="middle">1× = eager</text></svg>'
    )
    legend = " ".join(f'<span style="color:{color[i]}">■</span> {e(i)}' for i in impls)
    return "".join(parts) + f"<p>{legend}</p>"


def _table(record: SpeedRecord) -> str:
    e = html.escape
    impls = record.implementations()
    head = "".join(f"<th>{e(i)}</th>" for i in impls)
    rows = []
    for w in record.workloads():
        cells = []
        for i in impls:
            us = record.us(i, w)
            err = next((t.error for t in record.timings if t.workload == w and t.implementation == i), None)
            cells.append(f'<td class="num">{us:.1f}</td>' if us is not None else f"<td>{e(err or '-')}</td>")
        rows.append(f"<tr><td>{e(w)}</td>{''.join(cells)}</tr>")
    return (
        f"<details><summary>µs per call</summary><table><thead><tr><th>workload</th>{head}</tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table></details>"
    )


def render_speed_html(records: Sequence[SpeedRecord]) -> str:
    """A `<section class="kh-speed">` with a chart per record; "" when the commit has no speed record."""
    if not records:
        return ""
    e = html.escape
    parts = [f'<section class="kh-speed"><style>{_CSS}</style><h3>Speed (kernel-hub bench)</h3>']
    for r in records:
        env = r.env
        parts.append(
            f"<h4>{e(r.device)} · torch {e(env.torch or '-')} · CUDA {e(env.cuda or '-')} · {e(r.dtype)}</h4>"
            f'<p class="note">{e(r.method)}; measured {e(r.measured_at)} ({e(r.fingerprint)}).</p>'
            + _chart(r)
            + _table(r)
        )
    parts.append("</section>")
    return "\n".join(parts)
