"""build/matrix.toml: the promised environments (product minus excludes) and the CI job lists from it."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from variant_names import CUDA_VARIANT

from registry.matrix.config import AXES, MatrixConfigError, load_config, parse_config
from registry.matrix.plan import build_jobs, compat_jobs, torch_cuda_arch_list

MATRIX = tomllib.loads((Path(__file__).resolve().parents[2] / "build" / "matrix.toml").read_text())


def test_repository_matrix_promises_the_issue_environments():
    c = load_config()
    assert c.axes["gpu_arch"] == ("sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120")
    assert c.axes["torch"] == ("2.11", "2.12", "2.13", "2.14")
    assert c.axes["cuda"] == ("12.6", "12.8", "13.0")
    assert c.axes["python"] == ("3.10", "3.11", "3.12", "3.13")
    assert c.axes["cpu"] == ("x86_64", "aarch64")
    # 6*4*3*4*2 = 576, minus Blackwell on CUDA 12.6: 2*4*1*4*2 = 64.
    assert len(c.environments()) == 576 - 64


def test_keys_other_parts_read_are_kept():
    assert MATRIX["kernel"]["name"] == "fused-mlp"
    for spec in MATRIX["variants"].values():
        assert {"kind", "backend", "archs"} <= set(spec)
    cuda = MATRIX["variants"][CUDA_VARIANT]
    assert {"ptx", "torch_target", "cuda", "torch_build"} <= set(cuda)
    assert MATRIX["variants"]["torch-cuda"]["triton"]


def base() -> dict:
    return {"environments": {a: ["x"] for a in AXES}}


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d["environments"].pop("cuda"), "lacks cuda"),
        (lambda d: d["environments"].update(torch=[]), "[environments].torch must be a non-empty list"),
        (lambda d: d["environments"].update(exclude=[{"cuda": ["x"]}]), "needs a `reason`"),
        (lambda d: d["environments"].update(exclude=[{"gpu": ["x"], "reason": "r"}]), "unknown keys ['gpu']"),
        (lambda d: d.pop("environments"), "no [environments] table"),
    ],
)
def test_malformed_matrix_files_say_what_is_wrong(mutate, message):
    data = base()
    mutate(data)
    with pytest.raises(MatrixConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_config(data)


def test_exclude_needs_every_listed_axis_to_match():
    data = {
        "environments": {
            "gpu_arch": ["sm_80", "sm_120"],
            "torch": ["2.11"],
            "cuda": ["12.6", "13.0"],
            "python": ["3.12"],
            "cpu": ["x86_64"],
            "os": ["linux"],
            "exclude": [{"gpu_arch": ["sm_120"], "cuda": ["12.6"], "reason": "too old"}],
        }
    }
    envs = parse_config(data).environments()
    assert [(e.gpu_arch, e.cuda) for e in envs] == [("sm_120", "13.0"), ("sm_80", "12.6"), ("sm_80", "13.0")]


def test_missing_matrix_file_names_the_flag(tmp_path):
    with pytest.raises(MatrixConfigError, match="--matrix PATH"):
        load_config(tmp_path / "nope.toml")


def test_build_jobs_cover_every_variant_with_the_arch_list_in_torch_syntax():
    jobs = {j["variant"]: j for j in build_jobs(MATRIX)}
    assert set(jobs) == set(MATRIX["variants"])
    cuda = jobs[CUDA_VARIANT]
    assert cuda["torch_cuda_arch_list"] == "8.0 8.9 9.0a 10.0a 12.0+PTX"
    assert cuda["cpu"] == "x86_64" and cuda["runner"] == "ubuntu-24.04"
    assert jobs["torch-cuda"]["archs"] == "sm_80 sm_89 sm_90a sm_100a sm_120"


def test_compat_jobs_one_per_promised_arch_with_a_runner():
    assert [j["gpu_arch"] for j in compat_jobs(MATRIX)] == list(MATRIX["environments"]["gpu_arch"])
    with pytest.raises(MatrixConfigError, match=r"\['sm_75'\]"):
        compat_jobs({**MATRIX, "ci": {"gpu_runners": {"sm_75": "old"}}})


def test_arch_list_rejects_names_torch_would_drop_silently():
    with pytest.raises(MatrixConfigError, match="'90a'"):
        torch_cuda_arch_list(["90a"], [])
