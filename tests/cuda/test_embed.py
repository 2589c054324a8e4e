"""The CUDA variant's table of Triton cubins and implementation paths (build/cuda/embed_cubins.py), checked
without nvcc or a GPU: the path table is well formed, the C++ launcher's arguments match the Triton kernels'
definitions, a real AOT cubin's parameters are what the launcher passes (Triton's two scratch pointers
appended), and the generated C++ holds the table (or only the path rows when nothing is embedded)."""

import json
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "build" / "cuda"))
import embed_cubins
import path_oracle

PACKAGE = REPO / "kernel_src" / "fused_mlp"
PATHS = embed_cubins.load_paths(PACKAGE)


def test_path_table_is_well_formed():
    assert set(PATHS.STEPS) == set(PATHS.IMPLS) == set(PATHS.FALLBACK)
    assert {s for s, _ in PATHS.TRITON_KERNELS} == set(PATHS.STEPS) - {
        "chain",
        "chain_backward",
    }  # CUDA C++ only
    assert set(PATHS.IMPLS) == set(embed_cubins.STEP_CODES)
    for step, impl in PATHS.FALLBACK.items():
        assert impl in PATHS.IMPLS[step] and (step, impl) not in PATHS.TRITON_KERNELS, (step, impl)
    for (step, impl), (kernel, role) in PATHS.TRITON_KERNELS.items():
        assert impl in PATHS.IMPLS[step] and kernel in embed_cubins.LAUNCH_SIGNATURES, (step, impl, kernel)
    assert "default" in PATHS.PATHS and set(PATHS.OPS) == set(embed_cubins.OP_CODES)
    for table in (PATHS.PATHS, PATHS.GRAPH_PATHS):
        for arch, keys in table.items():
            steps = {PATHS.split_key(k)[1] for k in keys}
            assert table is PATHS.GRAPH_PATHS or set(PATHS.STEPS) <= steps, arch  # every step has rows
            for key, rows in keys.items():
                op, step = PATHS.split_key(key)
                assert op is None or op in PATHS.OPS, key
                assert rows[-1][0] is None, f"{arch} {key}: the last row must admit any M"
                assert len(rows[-1]) == 2, f"{arch} {key}: the last row must admit any weights"
                bounds = [row[0] for row in rows[:-1] if len(row) == 2]
                assert bounds == sorted(bounds), f"{arch} {key}: bounds must grow"
                assert all(row[1] in PATHS.IMPLS[step] for row in rows), (arch, key, rows)
                for i, row in enumerate(rows):  # no row hidden by an earlier one that admits all it admits
                    assert not any(_covers(before, row) for before in rows[:i]), (
                        f"{arch} {key}: {row} is dead"
                    )
    assert all(i in embed_cubins.IMPL_CODES for impls in PATHS.IMPLS.values() for i in impls)
    default = {row[1] for rows in PATHS.PATHS["default"].values() for row in rows}
    assert not default & {impl for _, impl in PATHS.TRITON_KERNELS}, default


def _covers(before: tuple, row: tuple) -> bool:
    """Whether path table row `before` admits every call `row` admits (row bound and min weight bytes)."""
    rows_ok = before[0] is None or (row[0] is not None and row[0] <= before[0])
    return rows_ok and (before[2] if len(before) == 3 else 0) <= (row[2] if len(row) == 3 else 0)


def test_large_weight_bound_is_the_decode_threshold():
    """paths.LARGE_WEIGHT_BYTES (stdlib-only, so a copy) is configs.DECODE_MIN_WEIGHT_BYTES on sm_90a."""
    from fused_mlp.triton import configs

    assert PATHS.LARGE_WEIGHT_BYTES == configs.DECODE_MIN_WEIGHT_BYTES["sm_90a"]


def test_op_steps_name_known_ops_and_steps():
    """OP_STEPS (build_info's report, the generated kOpSteps) lists every op once, each with distinct known steps."""
    assert list(PATHS.OP_STEPS) == list(PATHS.OPS)
    for op, steps in PATHS.OP_STEPS.items():
        assert steps and len(set(steps)) == len(steps) and set(steps) <= set(PATHS.STEPS), (op, steps)
    used = {step for steps in PATHS.OP_STEPS.values() for step in steps}
    assert used == set(PATHS.STEPS), used  # a step no op runs would never be reported
    for table in (PATHS.PATHS, PATHS.GRAPH_PATHS):  # an op's own rows are for a step it runs
        for keys in table.values():
            for op, step in map(PATHS.split_key, keys):
                assert op is None or step in PATHS.OP_STEPS[op], (op, step)


def test_cpp_enums_follow_the_codes():
    """triton_launch.h's enums and counts as written (the generated static_asserts check them at build time)."""
    header = (PACKAGE / "cuda" / "csrc" / "triton_launch.h").read_text()
    for enum, count, codes in (("Step", "kNumSteps", embed_cubins.STEP_CODES), ("Op", "kNumOps", embed_cubins.OP_CODES),
                               ("Impl", "kNumImpls", embed_cubins.IMPL_CODES)):  # fmt: skip
        body = re.search(rf"enum class {enum} : int \{{([^}}]*)\}}", header).group(1)
        members = {name: int(v) for name, v in re.findall(r"(\w+) = (\d+)", body)}
        assert members == {embed_cubins._enumerator(n): c for n, c in codes.items()}, enum
        assert re.search(rf"constexpr int {count} = (\d+);", header).group(1) == str(len(codes)), count


def test_every_triton_role_is_shipped_for_sm_90a():
    """The roles the build embeds for sm_90a (all of TRITON_KERNELS, so `cuda_set_path` can force each in
    tests and bench_paths) are roles its AOT build ships; an arch without Hopper tables skips the tma ones."""
    from fused_mlp.triton import aot_build

    shipped = {(r.spec.kernel, r.role) for r in aot_build.shipped_rows("sm_90a", ("bf16",))}
    assert PATHS.triton_archs()["sm_90a"] == set(PATHS.TRITON_KERNELS.values()) <= shipped


def test_launcher_arguments_match_the_triton_kernels():
    from fused_mlp.triton import aot_build

    defs = aot_build.kernel_defs()
    for kernel, _ in PATHS.TRITON_KERNELS.values():
        kinds = " ".join(kind for _, kind in defs[kernel].params)
        assert embed_cubins.LAUNCH_SIGNATURES[kernel] == kinds, kernel
        embed_cubins.check_signature(kernel, kinds, [8 if k == "ptr" else 4 for k in kinds.split()] + [8, 8])


def test_signature_drift_is_refused():
    with pytest.raises(embed_cubins.EmbedError, match="LAUNCH_SIGNATURES"):
        embed_cubins.check_signature("act_and_mul_kernel", "ptr ptr ptr i32:16 i32", [8, 8, 8, 4, 4, 8, 8])
    with pytest.raises(embed_cubins.EmbedError, match="kernel ABI"):
        embed_cubins.check_signature("act_and_mul_kernel", "ptr ptr ptr i32:16", [8, 8, 8, 4, 8])


def _path_rows(source: str) -> list[tuple[int, ...]]:
    block = source.split("kPathRows[] = {")[1].split("};")[0]
    return [tuple(int(v) for v in row.split(",")) for row in re.findall(r"\{([-\d, ]+)\}", block)]


def _expected_path_rows(paths=PATHS) -> list[tuple[int, ...]]:
    """Both tables as (sm, captured, op, step, bound, min weight bytes, impl) codes, written out from the dicts."""
    rows = []
    for captured, table in ((0, paths.PATHS), (1, paths.GRAPH_PATHS)):
        for arch, keys in table.items():
            sm = 0 if arch == "default" else embed_cubins.arch_notation().parse_arch(arch).number
            for key, choices in keys.items():
                op, _, step = key.rpartition("/")
                for bound, impl, *weight in choices:
                    rows.append((sm, captured, embed_cubins.OP_CODES[op] if op else -1, embed_cubins.STEP_CODES[step],
                                 -1 if bound is None else bound, weight[0] if weight else 0,
                                 embed_cubins.IMPL_CODES[impl]))  # fmt: skip
    return rows


def test_rows_with_a_weight_bound_are_generated_in_table_order(tmp_path):
    """A test table with min-weight-bytes rows (a step's key, an op's key, the graph table, the default arch):
    each row's bound lands in the generated kPathRows beside its M bound, in table order; rows without one 0."""
    large = PATHS.LARGE_WEIGHT_BYTES
    package = path_oracle.package_with_rows(tmp_path / "pkg", path_oracle.WEIGHT_ROWS)
    embed_cubins.write_sources(tmp_path / "gen", package, None, None, "AOT off")
    rows = _path_rows((tmp_path / "gen" / embed_cubins.GEN_SOURCE).read_text())
    paths = embed_cubins.load_paths(package)
    assert rows == _expected_path_rows(paths) == embed_cubins.path_rows(paths)
    codes, impl = embed_cubins.STEP_CODES, embed_cubins.IMPL_CODES
    gate_up = [r for r in rows if r[:4] == (90, 0, -1, codes["gate_up"])]
    assert gate_up == [(90, 0, -1, 1, 256, 0, impl["triton"]), (90, 0, -1, 1, 2048, large, impl["split"]),
                       (90, 0, -1, 1, -1, 0, impl["tma"])]  # fmt: skip
    assert (0, 0, -1, codes["linear"], -1, large, impl["tma"]) in rows  # the default arch
    assert (90, 1, -1, codes["chain"], 64, large, impl["persistent"]) in rows  # the graph table
    ops = embed_cubins.OP_CODES
    shipped = {r for r in _expected_path_rows() if r[5] > 0}  # the real-width rows of the shipped tables
    assert shipped == {(90, g, -1, codes["gate_up"], 256, large, impl["split"]) for g in (0, 1)} | {
        (90, 1, ops["mlp"], codes["chain"], 16, 4 << 20, impl["layers"])
    }, shipped
    assert sum(r[5] > 0 for r in rows) == 7  # the test table's five, and two shipped ones it does not replace


def test_both_backends_share_the_real_width_bounds_and_split_rows():
    """The Triton backend's decode bound and split rows (triton/configs.py) are the CUDA table's: a user gets the
    same path at a real model's widths from either variant."""
    from fused_mlp.triton import configs

    assert configs.LARGE_WEIGHT_BYTES == PATHS.LARGE_WEIGHT_BYTES == configs.DECODE_MIN_WEIGHT_BYTES["sm_90a"]
    lo, hi, min_bytes = configs.GATE_UP_SPLIT["sm_90a"]
    for table in (PATHS.PATHS, PATHS.GRAPH_PATHS):
        rows = table["sm_90a"]["gate_up"]
        split = rows.index((hi, "split", min_bytes))
        assert rows[split - 1][0] == lo, rows  # the row before ends where split's rows start


@pytest.mark.parametrize(
    ("rows", "error"),
    [
        ('((256, "triton", 0), (None, "tma"))', "positive int"),
        ('((256, "triton", 1.5), (None, "tma"))', "positive int"),
        ('((256, "triton", True), (None, "tma"))', "positive int"),
        ('((256, "triton", 1, 2), (None, "tma"))', "must be \\(max rows"),
        ('((256, "triton"), (None, "tma", LARGE_WEIGHT_BYTES))', "last row .* must admit every call"),
        ('((256, "triton"), (4096, "tma"))', "last row .* must admit every call"),
    ],
)
def test_malformed_weight_rows_fail_the_build(tmp_path, rows, error):
    """The build refuses a row it would compile wrongly, naming the key: a weight bound that is not a positive
    int, a row of other length, a key whose last row does not admit every call (C++ would find no row)."""
    package = path_oracle.package_with_rows(tmp_path, f'PATHS["sm_90a"]["gate_up"] = {rows}')
    with pytest.raises(embed_cubins.EmbedError, match=f"sm_90a gate_up: .*{error}"):
        embed_cubins.write_sources(tmp_path / "gen", package, None, None, "AOT off")


def test_without_cubins_only_the_path_table_is_written(tmp_path):
    summary = embed_cubins.write_sources(tmp_path, PACKAGE, None, None, "AOT off")
    source = (tmp_path / embed_cubins.GEN_SOURCE).read_text()
    assert summary.cubins == 0 and summary.triton is None and summary.note == "AOT off"
    assert "kNumTritonCubins = 0;" in source and "kCubinBlob = nullptr;" in source and ".incbin" not in source
    assert not (tmp_path / embed_cubins.BLOB).exists()
    assert _path_rows(source) == _expected_path_rows()


def _initialiser(source: str, declaration: str) -> str:
    """The text between `declaration = {` and its closing `};` in the generated source."""
    return source.split(declaration + " = {")[1].split("};")[0]


def test_generated_code_tables_follow_paths(tmp_path):
    """Names, fallbacks and each op's steps in the generated C++ are paths.py's, indexed by embed_cubins' codes,
    with a static_assert for every enumerator and count of triton_launch.h."""
    embed_cubins.write_sources(tmp_path, PACKAGE, None, None, "AOT off")
    source = (tmp_path / embed_cubins.GEN_SOURCE).read_text()
    steps = sorted(PATHS.STEPS, key=embed_cubins.STEP_CODES.get)
    ops = sorted(PATHS.OPS, key=embed_cubins.OP_CODES.get)
    impls = sorted(embed_cubins.IMPL_CODES, key=embed_cubins.IMPL_CODES.get)
    for array, names in (("kStepNames", steps), ("kOpNames", ops), ("kImplNames", impls)):
        assert re.findall(r'"(\w+)"', _initialiser(source, f"const char* const {array}[]")) == names, array
    fallback = _initialiser(source, "const int kFallbackImpl[]")
    assert [int(v) for v in fallback.split(",")] == [
        embed_cubins.IMPL_CODES[PATHS.FALLBACK[s]] for s in steps
    ]
    rows = re.findall(r"\{([-\d, ]+)\}", _initialiser(source, "const int kOpSteps[][kNumSteps]"))
    got = [[steps[int(v)] for v in row.split(",") if int(v) >= 0] for row in rows]
    assert got == [list(PATHS.OP_STEPS[op]) for op in ops]
    assert all(len(row.split(",")) == len(steps) for row in rows), rows  # padded to kNumSteps with -1
    asserted = dict(re.findall(r"static_assert\(static_cast<int>\((\w+::\w+)\) == (\d+),", source))
    for enum, codes in (("Step", embed_cubins.STEP_CODES), ("Op", embed_cubins.OP_CODES),
                        ("Impl", embed_cubins.IMPL_CODES)):  # fmt: skip
        for name, code in codes.items():
            assert asserted.pop(f"{enum}::{embed_cubins._enumerator(name)}") == str(code), name
    assert not asserted, asserted
    for count, n in (("kNumSteps", len(steps)), ("kNumOps", len(ops)), ("kNumImpls", len(impls))):
        assert f"static_assert({count} == {n}," in source, count
    for array in ("kStepNames", "kOpNames", "kImplNames", "kFallbackImpl", "kOpSteps"):
        assert f"static_assert(sizeof({array}) / sizeof({array}[0]) == kNum" in source, array


def test_codes_with_gaps_are_refused(monkeypatch):
    """C++ indexes the generated arrays by code: codes must run 0..n-1."""
    monkeypatch.setitem(embed_cubins.IMPL_CODES, "layers", 7)
    with pytest.raises(embed_cubins.EmbedError, match="IMPL_CODES"):
        embed_cubins.code_tables(PATHS)


def test_real_cubin_parameters_and_generated_table(tmp_path):
    """One kernel compiled for sm_90a by the real Triton compiler (~5 s), then embedded."""
    want = {"sm_90a": [["act_and_mul_kernel", "act_and_mul"]]}
    roles = {"sm_90a": ["act_and_mul"]}
    rows = embed_cubins.aot_rows(PACKAGE, sys.executable, want, tmp_path / "cubins", dtypes=("bf16",))
    assert rows["compiled"] == roles and not rows["reused"] and len(rows["rows"]) == 5, (
        rows
    )  # one per activation
    again = embed_cubins.aot_rows(
        PACKAGE, sys.executable, want, tmp_path / "unused", reuse=tmp_path / "cubins", dtypes=("bf16",)
    )
    assert again["reused"] == roles and not again["compiled"] and not (tmp_path / "unused").exists(), again
    import triton

    cuobjdump = str(Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump")
    first = Path(rows["rows"][0]["dir"]) / f"{rows['rows'][0]['stem']}.cubin"
    assert embed_cubins.kernel_param_sizes(cuobjdump, first) == [8, 8, 8, 4, 8, 8]
    summary = embed_cubins.write_sources(tmp_path / "gen", PACKAGE, rows, cuobjdump, "test")
    assert (summary.triton, summary.archs, summary.cubins, summary.entries) == (
        triton.__version__,
        ("sm_90a",),
        5,
        5,
    )
    source = (tmp_path / "gen" / embed_cubins.GEN_SOURCE).read_text()
    blob = (tmp_path / "gen" / embed_cubins.BLOB).read_bytes()
    entries = re.findall(
        r'\{"act_and_mul_kernel", 2, 0, 90, 0, (\d), 0, 0, -1, .*, (\d+)ull, (\d+)ull, 0\}', source
    )
    assert sorted(int(act) for act, _, _ in entries) == [0, 1, 2, 3, 4]
    for _, offset, size in entries:
        assert int(offset) % 128 == 0 and blob[int(offset) : int(offset) + 4] == b"\x7fELF"
        assert int(offset) + int(size) <= len(blob)
    assert f'.incbin \\"{(tmp_path / "gen" / embed_cubins.BLOB).resolve()}\\"' in source
    assert f'kTritonVersion[] = "{triton.__version__}"' in source
    meta = json.loads(first.with_suffix(".json").read_text())
    sys.path.insert(0, str(REPO / "kernel_src"))
    from fused_mlp.triton.configs import elementwise_config

    ew = elementwise_config("sm_90a")  # the cubin's warps are the arch's elementwise config
    assert meta["num_warps"] == ew.num_warps and meta["shared"] == 0 and not meta["launch_pdl"]
