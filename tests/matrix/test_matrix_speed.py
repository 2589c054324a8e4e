"""Speed records in the matrix: the loader's order (fastest recorded first, recorded-slower variants skipped) decides
the cell, the cell shows the expected speed-up, the page charts every record; the record format round-trips.

The numbers are the H200 finding of issue #10 (gated_mlp M=8192: stable-ABI 550 µs, torch-cuda 245 µs,
eager 246 µs).
"""

from __future__ import annotations

import json

from matrix_fixtures import STABLE, fixture_full_version  # noqa: F401 (fixture)

from registry.client.resolve import Env
from registry.client.speed_records import SpeedRecord, Timing, parse_speed_record, recorded_order
from registry.client.workloads import SPEED_CHECK
from registry.matrix import render_json, render_markdown
from registry.matrix.cells import build_matrix
from registry.matrix.config import MatrixEnv, load_config
from registry.matrix.files import matrix_from_files
from registry.matrix.speed_chart import render_speed_html

COMMIT = "c" * 40
H200 = Env("linux", "x86_64", "3.12", "2.11.0+cu130", "13.0", "sm_90", "3.6.0", True, "13.0")
# µs per workload of SPEED_CHECK: mlp M=16, mlp M=8192, gated M=1024, gated M=8192
US = {
    STABLE: (20.0, 300.0, 60.0, 550.0),
    "torch-cuda": (22.0, 280.0, 45.0, 245.0),
    "eager": (40.0, 310.0, 50.0, 246.0),
}


def record(us=US, env=H200) -> SpeedRecord:
    timings = tuple(Timing(w.name, impl, t) for impl, ts in us.items() for w, t in zip(SPEED_CHECK, ts))
    return SpeedRecord(
        env,
        "NVIDIA H200 sm_90",
        "org/fused-mlp",
        1,
        COMMIT,
        "bfloat16",
        timings,
        "2026-12-04T10:00:00+00:00",
        "test",
    )


def test_the_fastest_recorded_variant_goes_first_and_the_slower_one_is_named():
    order, speedups = recorded_order([STABLE, "torch-cuda", "torch-cpu"], [record()], H200)
    assert order == ["torch-cuda", STABLE, "torch-cpu"]  # unrecorded variants keep their place, after
    assert speedups["torch-cuda"] > 1 > speedups[STABLE]  # geometric means over the workloads
    assert record().slower_than_eager(STABLE) == (
        "recorded slower than eager on NVIDIA H200 sm_90: gated_mlp M=1024 60 µs vs 50 µs; "
        "gated_mlp M=8192 550 µs vs 246 µs"
    )
    assert record().slower_than_eager("torch-cuda") is None
    other_arch = Env("linux", "x86_64", "3.12", "2.11.0", "13.0", "sm_80", "3.6.0")
    assert recorded_order([STABLE, "torch-cuda"], [record()], other_arch)[0] == [STABLE, "torch-cuda"]


def test_record_json_round_trips_and_rejects_other_schemas():
    r = record()
    data = json.loads(json.dumps(r.to_json()))
    assert parse_speed_record(data) == r and data["fingerprint"].startswith("sm_90-x86_64-py3.12-")
    data["schema"] = 9
    try:
        parse_speed_record(data)
    except ValueError as e:
        assert "re-run `kernel-hub bench`" in str(e)
    else:
        raise AssertionError("schema 9 parsed")


def test_the_cell_follows_the_records_and_shows_the_speedup(full_version):
    m = build_matrix(
        load_config(), repo="org/fused-mlp", version=1, commit=COMMIT, variants=full_version, speed=[record()]
    )
    h200 = next(c for c in m.cells if c.env == MatrixEnv("sm_90", "2.11", "13.0", "3.12", "x86_64", "linux"))
    assert h200.chosen == "torch-cuda" and h200.label.startswith("torch-cuda (AOT sm_90a) ×")
    other_torch = next(
        c for c in m.cells if c.env == MatrixEnv("sm_90", "2.12", "13.0", "3.12", "x86_64", "linux")
    )
    assert other_torch.chosen == "torch-cuda"  # same arch, no record of that torch: the arch's records count
    a100 = next(c for c in m.cells if c.env == MatrixEnv("sm_80", "2.11", "13.0", "3.12", "x86_64", "linux"))
    assert a100.chosen == STABLE and a100.speedup is None  # no record for sm_80: kernels' preference
    assert "×" in render_markdown(m) and "Speed records" in render_markdown(m)
    assert json.loads(render_json(m))["speed"][0]["kind"] == "speed"

    every_one_slow = record(
        {STABLE: US[STABLE], "torch-cuda": (22.0, 280.0, 60.0, 600.0), "eager": US["eager"]}
    )
    m = build_matrix(
        load_config(),
        repo="org/fused-mlp",
        version=1,
        commit=COMMIT,
        variants=full_version,
        speed=[every_one_slow],
    )
    h200 = next(c for c in m.cells if c.env == MatrixEnv("sm_90", "2.11", "13.0", "3.12", "x86_64", "linux"))
    assert h200.chosen is None and "torch-cuda: recorded slower than eager" in h200.reason


def test_the_page_section_charts_the_records_of_the_commit(full_version):
    files = {f"build/{v}/metadata.json": json.dumps(m).encode() for v, m in full_version.items()}
    compat = {f"speed/{COMMIT}/{record().fingerprint}.json": json.dumps(record().to_json()).encode()}
    matrix, warnings = matrix_from_files(
        repo="org/fused-mlp", version=1, commit=COMMIT, paths=files, read=files.__getitem__, compat=compat
    )
    assert not warnings and len(matrix.speed) == 1
    page = render_speed_html(matrix.speed)
    assert (
        page.startswith('<section class="kh-speed">') and page.count("<rect ") == 8
    )  # 4 workloads x 2 variants
    assert "×2.00" in page and "1× = eager" in page and "gated GeGLU-tanh H=768 I=3072 M=8192" in page
    assert render_speed_html(()) == ""
