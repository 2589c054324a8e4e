"""registry.client.gpu: which GPU the loader decides for, read from NVML only when the answer is the one
torch would give (CPU: the decision on NVML's reports; GPU: NVML against torch, without CUDA start-up)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from registry.client.gpu import UNSURE, decide, visible_devices

H200 = ("NVIDIA H200", "GPU-1111-aaaa", 9, 0)
H200_B = ("NVIDIA H200", "GPU-2222-bbbb", 9, 0)
L4 = ("NVIDIA L4", "GPU-3333-cccc", 8, 9)


@pytest.mark.parametrize(
    ("spec", "want"),
    [
        (None, [0, 1, 2]),
        ("2,0", [2, 0]),
        (" 1 , 0", [1, 0]),
        ("0,7,1", [0]),  # CUDA stops at the first entry naming no device
        ("-1", []),
        ("", []),
        ("GPU-2222", [1]),
        ("GPU-", []),  # a prefix of several UUIDs names none
        ("MIG-5a5a", None),
        ("0,0", None),
        ("gpu0", None),
    ],
)
def test_visible_devices_reads_cuda_visible_devices_as_cuda_does(spec, want):
    assert visible_devices(spec, [H200[1], H200_B[1], L4[1]]) == want


def test_identical_devices_are_certain_in_any_order():
    assert decide([H200, H200_B], 13, 13, None) == ("NVIDIA H200", 9, 0)
    assert decide([H200, H200_B, L4], 13, 13, "1,0") == ("NVIDIA H200", 9, 0)
    assert decide([L4, H200], 13, 13, "0") == ("NVIDIA L4", 8, 9)


def test_unsure_cases_go_to_torch():
    assert decide([H200, L4], 13, 13, None) is UNSURE  # CUDA orders fastest first: which is cuda:0?
    assert decide([H200, H200_B], 12, 13, None) is UNSURE  # a driver torch cannot use
    assert decide([H200], 13, 13, "MIG-1") is UNSURE


def test_no_visible_device_is_no_gpu():
    assert decide([H200], 13, 13, "") is None
    assert decide([], 13, 13, None) is None


@pytest.mark.gpu
def test_nvml_answer_equals_torchs_and_starts_no_cuda():
    code = (
        "import torch\n"
        "from registry.client import gpu\n"
        "from registry.client.resolve import current_env\n"
        "from registry.client.check import device_label\n"
        "found = gpu._from_nvml(int(torch.version.cuda.split('.')[0]))\n"
        "env, label = current_env(), device_label('cuda')\n"
        "assert not torch.cuda.is_initialized(), 'the NVML path started CUDA'\n"
        "major, minor = torch.cuda.get_device_capability()\n"
        "want = (torch.cuda.get_device_name(), major, minor)\n"
        "assert found == want, (found, want)\n"
        "assert env.gpu_arch == f'sm_{major}{minor}' and label == f'{want[0]} sm_{major}{minor}', (env, label)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
