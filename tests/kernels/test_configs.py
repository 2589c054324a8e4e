"""Config tables: row-bound lookup, which archs launch with PDL, and that every table has a catch-all row."""

import pytest
from fused_mlp.triton import configs


@pytest.mark.parametrize(("arch", "pdl"), (("sm_90a", True), ("sm_100a", True), ("sm_120", True), ("sm_103", True),
                                           ("sm_80", False), ("sm_89", False), ("interpreter", False),
                                           ("default", False)))  # fmt: skip
def test_pdl_is_on_from_hopper(monkeypatch, arch, pdl):
    """Programmatic dependent launch is a cc 9.0+ feature: Blackwell (sm_100a, sm_120) has it too. The old
    check read the major from two characters (`int(arch[3:5]) >= 90`), so sm_100a was 10 and lost PDL."""
    monkeypatch.setattr(configs, "PDL_ENABLED", True)
    assert configs.uses_pdl(arch, 16) is pdl
    assert configs.uses_pdl(arch, configs.PDL_MAX_ROWS + 1) is False


def test_rows_pick_the_first_admitting_bound():
    table = configs.LINEAR["sm_90a"]
    assert configs.gemm_config(configs.LINEAR, "sm_90a", 16) == table[0][1]
    assert configs.gemm_config(configs.LINEAR, "sm_90a", 17) == table[1][1]
    assert configs.gemm_config(configs.LINEAR, "sm_90a", 10**6) == table[-1][1]


def test_unknown_arch_uses_default_table():
    assert configs.gemm_config(configs.LINEAR, "sm_75", 8) == configs.LINEAR["default"][0][1]


@pytest.mark.parametrize("tables", (configs.LINEAR, configs.GATE_UP))
def test_every_table_has_catch_all(tables):
    for arch, table in tables.items():
        assert table[-1][0] is None, arch


def test_hopper_tables_use_no_warp_specialization():
    """No shipped Hopper config is warp-specialized: with Triton 3.6 that K loop compiles (4 warps, no split
    epilogue, no DUAL) but the gate/up kernel wrote NaN on the H200 at every M (2026-12-03), and the GPU
    tests of the form were removed with it; every Hopper role has a catch-all row."""
    for role, tables in configs.TMA_ROLES.items():
        for arch, table in tables.items():
            assert table[-1][0] is None, (role, arch)
            for _, row in table:
                for cfg in configs.alternatives(row):
                    assert not cfg.warp_spec, (role, arch, cfg)


def test_fp32_hopper_tiles_fit_shared_memory():
    cfg = configs.fit_element_size(configs.TmaConfig(128, 256, 64, 8, 8, 4), 4)
    assert (cfg.BK, cfg.BN, cfg.num_stages) == (32, 64, 3)
    assert configs.fit_element_size(cfg, 2) == cfg


def test_hopper_tile_alternative_fills_the_last_wave():
    """A row's first tile unless its tiles leave the last wave of SMs under WAVE_FILL (H200: 128x256 for
    8192 x 1024, 128x128 for 8192 x 768, where 128x256 gives 192 tiles = 73% of two waves of 132)."""
    wide, square = configs.TmaConfig(128, 256, 64, 8, 8, 3), configs.TmaConfig(128, 128, 64, 8, 8, 4)
    assert (
        configs.wave_fill(wide, 8192, 768, 132)
        < configs.WAVE_FILL
        <= configs.wave_fill(square, 8192, 768, 132)
    )
    table = {"sm_90a": ((None, (wide, square)),)}
    with pytest.MonkeyPatch.context() as m:
        m.setitem(configs.TMA_ROLES, "linear", table)
        assert configs.tma_config("linear", "sm_90a", 8192, 2, 1024, 132) == wide
        assert configs.tma_config("linear", "sm_90a", 8192, 2, 768, 132) == square
        assert configs.tma_config("linear", "sm_90a", 8192) == wide  # no shape given: the first
