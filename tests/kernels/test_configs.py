"""Config tables: row-bound lookup, arch naming, and that every table has a catch-all row."""

import pytest
from fused_mlp.triton import configs


@pytest.mark.parametrize(("cap", "arch"), (((9, 0), "sm_90a"), ((8, 0), "sm_80"), ((8, 9), "sm_89"),
                                           ((10, 0), "sm_100a"), ((12, 0), "sm_120"), (None, "interpreter")))  # fmt: skip
def test_arch_of(cap, arch):
    assert configs.arch_of(cap) == arch


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
