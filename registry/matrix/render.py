"""Render a `Matrix` as markdown (CI job summaries), JSON (tools) and HTML (the hub's kernel page).

Markdown and HTML collapse the product so a table stays readable: one row per GPU arch × CUDA ×
torch range (adjacent torch minors with identical cells merge), one column per CPU, and Python
versions folded into a cell unless they differ; HTML (the hub's pages) further merges rows that say the same
everywhere (`compact`). CPU rows (GPU "cpu") are machines without a GPU. JSON keeps every environment.
"""

from __future__ import annotations

import dataclasses
import html
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from registry.client.speed_records import BASELINE, SpeedRecord
from registry.spec.arch import parse_arch

from .cells import FAILED, FALLBACK_STATUS, STATUS_ORDER, VERIFIED, Cell, Matrix
from .records import CheckRecord

MARK = {VERIFIED: "✅", FAILED: "❌", FALLBACK_STATUS: "⚠️", "static": ""}
# Plain glyphs for HTML: common system fonts (DejaVu) have them, not every machine has an emoji font.
HTML_MARK = {VERIFIED: "✓", FAILED: "✗", FALLBACK_STATUS: "⚠", "static": ""}
LEGEND = (
    "Cell = the variant `get_kernel` picks there (resolved from the version's metadata, no GPU needed) "
    "and how its code runs; {verified} a recorded check passed on such a machine, {failed} a recorded check "
    "failed, {fallback} no variant fits: the loader falls back to torch.compile of the reference. "
    "×N vs eager: the speed-up `kernel-hub bench` recorded for that variant on that GPU arch "
    "(geometric mean over the standard workloads)."
)


def problem_groups(problems: Sequence[str], examples: int = 2) -> list[str]:
    """Broken promises in few lines: those with the same reason (the text after `<where>: `) become one line
    with a count and `examples` places. `kernel-hub matrix -v` and the JSON rendering keep every one."""
    groups: dict[str, list[str]] = {}
    for p in problems:
        where, _, why = p.partition(": ")
        groups.setdefault(why or where, []).append(where)
    out = []
    for why, places in groups.items():
        if len(places) == 1:
            out.append(f"{places[0]}: {why}")
        else:
            shown = "; ".join(places[:examples])
            out.append(f"{why}: {len(places)} environments, e.g. {shown}")
    return out


def inline_code(text: str) -> str:
    """HTML of a one-line text whose `backticks` mark code (the legend is shared with markdown)."""
    parts = html.escape(text).split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


def _version_key(text: str) -> tuple:
    return tuple(int(p) if p.isdigit() else p for p in text.replace("-", ".").split("."))


def _arch_key(text: str) -> tuple:
    try:
        a = parse_arch(text)
    except ValueError:
        return (999, 0, text)
    return (a.major, a.minor, a.suffix)


def _check_note(c: CheckRecord) -> str:
    err = max(c.max_error.values()) if c.max_error else None
    err_text = f", max rel. error {err:.1e}" if err is not None else ""
    verdict = "passed" if c.passed else f"FAILED: {c.detail}"
    return f"{verdict} on {c.fingerprint} ({c.checked_at[:10]}{err_text})"


def _cell_text(cells: Sequence[Cell]) -> tuple[str, str, list[str]]:
    """(text, most notable status, check notes) for the cells of one table position (Python versions)."""
    by_label: dict[str, list[str]] = {}
    for c in cells:
        by_label.setdefault(c.label, []).append(c.env.python)
    if len(by_label) == 1:
        text = next(iter(by_label))
    else:
        text = "; ".join(f"py{'/'.join(pys)}: {label}" for label, pys in by_label.items())
    notable = min((c.status for c in cells), key=STATUS_ORDER.index)
    notes = [f"py{c.env.python}: {_check_note(r)}" for c in cells for r in c.checks]
    return text, notable, notes


@dataclass(frozen=True)
class Row:
    gpu_arch: str
    cuda: str
    torch: str  # "2.11" or a merged range "2.12–2.13"
    cells: tuple[tuple[str, str, tuple[str, ...]], ...]  # per CPU column: (text, status, notes)


def table(matrix: Matrix) -> tuple[list[str], list[Row]]:
    """(CPU columns, rows) of the collapsed table."""
    cpus = sorted({c.env.cpu for c in matrix.cells})
    groups: dict[tuple[str, str, str], dict[str, list[Cell]]] = {}
    for c in matrix.cells:
        groups.setdefault((c.env.gpu_arch, c.env.cuda, c.env.torch), {}).setdefault(c.env.cpu, []).append(c)
    keys = sorted(groups, key=lambda k: (_arch_key(k[0]), _version_key(k[1]), _version_key(k[2])))
    rows: list[Row] = []
    for arch, cuda, torch in keys:
        content = []
        for cpu in cpus:
            text, status, notes = _cell_text(groups[(arch, cuda, torch)].get(cpu, []) or [])
            content.append((text, status, tuple(notes)))
        content = tuple(content)
        prev = rows[-1] if rows else None
        # Merge with the previous torch minor when nothing differs and neither row has recorded checks.
        if prev and (prev.gpu_arch, prev.cuda) == (arch, cuda) and _same(prev.cells, content):
            first = prev.torch.split("–")[0]
            rows[-1] = Row(arch, cuda, f"{first}–{torch}", prev.cells)
        else:
            rows.append(Row(arch, cuda, torch, content))
    return cpus, rows


def _merge(rows: list[Row], same: str, join: str) -> list[Row]:
    """Rows equal in every field but `join` (and with no recorded check) become one, `join` listing theirs."""
    groups: dict[tuple, list[Row]] = {}
    for r in rows:
        checked = any(c[2] for c in r.cells)
        key = ("row", id(r)) if checked else (getattr(r, same), r.torch, tuple(c[:2] for c in r.cells))
        groups.setdefault(key, []).append(r)
    out = []
    for group in groups.values():
        values = ", ".join(dict.fromkeys(getattr(r, join) for r in group))
        out.append(dataclasses.replace(group[0], **{join: values}))
    return out


def compact(rows: list[Row]) -> list[Row]:
    """Rows that say the same everywhere merge: first the GPU archs of one CUDA and torch range, then the
    CUDA versions of one such arch list. Each merged row stands for exactly the product it lists, so a page
    shows one "fallback" line instead of one per arch and CUDA, and never claims a cell another row contradicts."""
    return _merge(_merge(rows, "cuda", "gpu_arch"), "gpu_arch", "cuda")


def _same(a: tuple, b: tuple) -> bool:
    return all(x[:2] == y[:2] and not x[2] and not y[2] for x, y in zip(a, b, strict=True))


def _python_span(matrix: Matrix) -> str:
    pys = sorted({c.env.python for c in matrix.cells}, key=_version_key)
    return f"{pys[0]}–{pys[-1]}" if len(pys) > 1 else (pys[0] if pys else "-")


def render_markdown(matrix: Matrix) -> str:
    """A markdown report: header, legend, the collapsed table, other machines' checks, problems."""
    cpus, rows = table(matrix)
    out = [
        f"### Compatibility matrix: {matrix.repo} v{matrix.version} (`{matrix.commit[:12]}`)",
        "",
        (
            f"Variants: {', '.join(f'`{v}`' for v in matrix.variants) or 'none'}. Python {_python_span(matrix)} "
            "in every cell unless a cell says otherwise."
        ),
        "",
        LEGEND.format(**MARK),
        "",
        "| GPU | CUDA | torch | " + " | ".join(cpus) + " |",
        "|---|---|---|" + "---|" * len(cpus),
    ]
    notes = []
    for r in rows:
        texts = []
        for text, status, cell_notes in r.cells:
            texts.append((MARK[status] + " " if MARK[status] else "") + text.replace("|", "\\|"))
            notes += [f"{r.gpu_arch} CUDA {r.cuda} torch {r.torch}: {n}" for n in cell_notes]
        out.append(f"| {r.gpu_arch} | {r.cuda} | {r.torch} | " + " | ".join(texts) + " |")
    if notes:
        out += ["", "Recorded checks:", *(f"- {n}" for n in notes)]
    if matrix.speed:
        out += ["", "Speed records (`kernel-hub bench`, speed-up over eager, geometric mean over workloads):"]
        out += [f"- {_speed_line(s)}" for s in matrix.speed]
    if matrix.other_checks:
        out += ["", "Checks recorded on machines outside the promised environments:"]
        out += [f"- {_machine(c)}: {_path(c)} — {_check_note(c)}" for c in matrix.other_checks]
    problems = matrix.problems()
    out += [
        "",
        f"**{len(problems)} broken promise(s).**"
        if problems
        else "**Every promised environment has a hub kernel.**",
    ]
    out += [f"- {p}" for p in problem_groups(problems)]
    return "\n".join(out) + "\n"


def _speed_line(s: SpeedRecord) -> str:
    ups = ", ".join(
        f"{i} ×{u:.2f}" for i in s.implementations() if i != BASELINE and (u := s.speedup(i)) is not None
    )
    return f"{s.device}, torch {s.env.torch}, {s.dtype} ({s.measured_at[:10]}): {ups}"


def _machine(c: CheckRecord) -> str:
    e = c.env
    return (
        f"{e.gpu_arch or 'no GPU'}, torch {e.torch or '-'}, CUDA {e.cuda or '-'}, Python {e.python}, "
        f"{e.cpu}-{e.os}"
    )


def _path(c: CheckRecord) -> str:
    return f"{c.variant} (hub)" if c.variant else f"{c.source} — {c.reason}"


def render_json(matrix: Matrix) -> str:
    """Every environment as its own entry, with checks and problems; stable key order."""

    def cell(c: Cell) -> dict:
        return {
            "env": dataclasses.asdict(c.env),
            "variant": c.chosen,
            "how": c.how,
            "reason": c.reason,
            "label": c.label,
            "status": c.status,
            "checks": [r.to_json() for r in c.checks],
            "speedup": c.speedup,
        }

    data = {
        "repo": matrix.repo,
        "version": matrix.version,
        "commit": matrix.commit,
        "variants": list(matrix.variants),
        "cells": [cell(c) for c in matrix.cells],
        "other_checks": [r.to_json() for r in matrix.other_checks],
        "speed": [s.to_json() for s in matrix.speed],
        "problems": matrix.problems(),
    }
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


_CSS = """
.kh-matrix{font:14px/1.4 system-ui,sans-serif;margin:1em 0}
.kh-matrix table{border-collapse:collapse}
.kh-matrix th,.kh-matrix td{border:1px solid #ccd;padding:4px 8px;text-align:left;vertical-align:top}
.kh-matrix th{background:#eef}.kh-matrix td:nth-child(-n+3){white-space:nowrap}
.kh-matrix td.verified{background:#e3f7e3}.kh-matrix td.failed{background:#fbe0e0}
.kh-matrix td.fallback{background:#fff3d6}.kh-matrix .note{color:#555;font-size:12px}
.kh-matrix .problems{color:#a00}
"""


def render_html(matrix: Matrix) -> str:
    """An HTML fragment (a <section> with its own scoped CSS) the hub's kernel page embeds per version."""
    e = html.escape
    cpus, rows = table(matrix)
    rows = compact(rows)
    parts = [
        f'<section class="kh-matrix" id="matrix-v{matrix.version}"><style>{_CSS}</style>',
        f"<h3>Compatibility matrix v{matrix.version} <code>{e(matrix.commit[:12])}</code></h3>",
        (
            f"<p>Variants: {e(', '.join(matrix.variants) or 'none')}. Python {e(_python_span(matrix))} "
            f'unless a cell says otherwise.</p><p class="note">{inline_code(LEGEND.format(**HTML_MARK))}</p>'
        ),
        "<table><thead><tr><th>GPU</th><th>CUDA</th><th>torch</th>"
        + "".join(f"<th>{e(c)}</th>" for c in cpus)
        + "</tr></thead><tbody>",
    ]
    for r in rows:
        tds = []
        for text, status, notes in r.cells:
            note = "".join(f'<div class="note">{e(n)}</div>' for n in notes)
            tds.append(f'<td class="{status}">{HTML_MARK[status]} {e(text)}{note}</td>')
        parts.append(
            f"<tr><td>{e(r.gpu_arch)}</td><td>{e(r.cuda)}</td><td>{e(r.torch)}</td>{''.join(tds)}</tr>"
        )
    parts.append("</tbody></table>")
    if matrix.other_checks:
        parts.append("<p>Checks on machines outside the promised environments:</p><ul>")
        parts += [
            f"<li>{e(_machine(c))}: {e(_path(c))} — {e(_check_note(c))}</li>" for c in matrix.other_checks
        ]
        parts.append("</ul>")
    problems = matrix.problems()
    if problems:
        parts.append(f'<div class="problems"><p>{len(problems)} broken promise(s):</p><ul>')
        parts += [f"<li>{e(p)}</li>" for p in problem_groups(problems)]
        parts.append("</ul></div>")
    parts.append("</section>")
    return "\n".join(parts)


def render_html_page(matrices: Iterable[Matrix], title: str) -> str:
    """A standalone HTML document with one matrix section per version (CLI `--format html`)."""
    body = "\n".join(render_html(m) for m in matrices)
    return (
        f'<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title></head>'
        f"<body><h1>{html.escape(title)}</h1>\n{body}\n</body></html>\n"
    )
