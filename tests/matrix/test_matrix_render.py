"""Renderings of one matrix: collapsed markdown, complete JSON, embeddable HTML."""

from __future__ import annotations

import json

from matrix_fixtures import STABLE, fixture_full_version, fixture_make_record, fixture_no_sm80_version  # noqa: F401 (fixtures)

from registry.matrix.cells import build_matrix
from registry.matrix.config import load_config
from registry.matrix.render import render_html, render_html_page, render_json, render_markdown, table

COMMIT = "e" * 40


def matrix(variants, records=()):
    return build_matrix(
        load_config(), repo="org/fused-mlp", version=3, commit=COMMIT, variants=variants, records=records
    )


def test_markdown_rows_collapse_python_and_equal_torch_minors(full_version):
    md = render_markdown(matrix(full_version))
    assert "| GPU | CUDA | torch | aarch64 | x86_64 |" in md
    assert f"| sm_90 | 13.0 | 2.11 | torch-cuda (AOT sm_90a) | {STABLE} (SASS sm_90a) |" in md
    assert f"| sm_90 | 13.0 | 2.12–2.14 | torch-cuda (Triton JIT) | {STABLE} (SASS sm_90a) |" in md
    assert "| sm_120 | 12.6 |" not in md  # excluded
    assert "Python 3.10–3.13 in every cell" in md
    assert "Every promised environment has a hub kernel." in md


def test_markdown_marks_fallbacks_and_lists_the_broken_promises(no_sm80_version):
    md = render_markdown(matrix(no_sm80_version))
    row = next(line for line in md.splitlines() if line.startswith("| sm_80 | 13.0 | 2.11"))
    assert "⚠️ fallback: torch.compile — no variant for sm_80" in row
    assert "broken promise(s)." in md


def test_rows_with_recorded_checks_are_never_merged_and_show_the_check(full_version, make_record):
    md = render_markdown(matrix(full_version, [make_record(COMMIT)]))
    assert f"| sm_90 | 13.0 | 2.11 | torch-cuda (AOT sm_90a) | ✅ {STABLE} (SASS sm_90a) |" in md
    assert "| sm_90 | 13.0 | 2.12–2.14 |" in md
    assert "py3.12: passed on sm_90-x86_64-py3.12-" in md and "max rel. error 1.2e-03" in md


def test_cells_that_differ_by_python_say_which_python(full_version, make_record):
    m = matrix(full_version, [make_record(COMMIT, python="3.13", passed=False, detail="boom")])
    _, rows = table(m)
    text, status, notes = next(
        r for r in rows if (r.gpu_arch, r.cuda, r.torch) == ("sm_90", "13.0", "2.11")
    ).cells[1]
    assert status == "failed" and notes and text == f"{STABLE} (SASS sm_90a)"


def test_json_keeps_every_environment(full_version):
    data = json.loads(render_json(matrix(full_version)))
    assert len(data["cells"]) == len(load_config().environments())
    first = data["cells"][0]
    assert set(first) == {"env", "variant", "how", "reason", "label", "status", "checks", "speedup"}
    assert data["commit"] == COMMIT and data["problems"] == []


def test_html_is_escaped_and_embeddable(no_sm80_version, make_record):
    r = make_record(
        COMMIT, gpu_arch=None, cuda=None, variant=None, source="fallback-compile", reason="<no CUDA device>"
    )
    fragment = render_html(matrix(no_sm80_version, [r]))
    assert fragment.startswith('<section class="kh-matrix" id="matrix-v3">') and fragment.endswith(
        "</section>"
    )
    assert "&lt;no CUDA device&gt;" in fragment and "<no CUDA" not in fragment
    assert 'class="fallback"' in fragment
    page = render_html_page([matrix(no_sm80_version)], "org/fused-mlp")
    assert page.startswith("<!doctype html>") and page.count("<section") == 1


def test_broken_promises_are_grouped_by_reason():
    from registry.matrix.render import problem_groups

    problems = [f"sm_{a} torch 2.11 Python 3.12: no variant fits (no CUDA variant)" for a in (80, 86, 90)]
    problems.append("sm_90 torch 2.11 Python 3.12: check on fp failed: boom")
    grouped = "no variant fits (no CUDA variant): 3 environments, e.g. sm_80 torch 2.11 Python 3.12; sm_86 torch 2.11 Python 3.12"
    assert problem_groups(problems) == [grouped, "sm_90 torch 2.11 Python 3.12: check on fp failed: boom"]
