"""Which GPU torch's current CUDA device is (name, compute capability), read from the driver's NVML when that
answer is certain, so that a warm `get_kernel` decides without initialising CUDA in torch.

Why: on the H200 torch's CUDA initialisation (what `torch.cuda.get_device_capability` triggers) costs
~0.3 s, more than everything else a warm load does. NVML answers in milliseconds. The answer must be
the one torch would give, so NVML is used only when it is certain; otherwise torch is asked:
- every device CUDA_VISIBLE_DEVICES leaves visible (read as CUDA reads it: indices or `GPU-` UUID
  prefixes, up to the first invalid entry) has the same name and capability, so neither CUDA's enumeration
  order (fastest first) nor the current device can change the answer; MIG entries go to torch;
- the driver supports torch's CUDA major version (else torch sees no device, and says so itself).
"""

from __future__ import annotations

import ctypes
import functools

from registry import constants

UNSURE = object()  # decide(): NVML cannot tell for certain; ask torch
_NAME_LEN = 96  # NVML_DEVICE_NAME_V2_BUFFER_SIZE
_UUID_LEN = 80  # NVML_DEVICE_UUID_V2_BUFFER_SIZE


def current_gpu() -> tuple[str, int, int] | None:
    """(name, major, minor) of torch's current CUDA device as torch names it, or None when torch sees no
    CUDA device."""
    import torch

    if torch.version.cuda is None:
        return None
    found = _from_nvml(int(torch.version.cuda.split(".")[0]))
    if found is not UNSURE:
        return found  # type: ignore[return-value]
    if not torch.cuda.is_available():
        return None
    major, minor = torch.cuda.get_device_capability()
    return torch.cuda.get_device_name(), major, minor


@functools.cache  # the visible devices are fixed for the process once CUDA starts; NVML is asked once
def _from_nvml(torch_cuda_major: int):
    """current_gpu's answer from NVML, or UNSURE when NVML cannot give it with certainty."""
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
        if nvml.nvmlInit_v2() != 0:
            return UNSURE
    except (OSError, AttributeError):
        return UNSURE
    try:
        read = _read(nvml)
    except AttributeError:  # an NVML too old for one of the calls
        read = None
    finally:
        nvml.nvmlShutdown()
    if read is None:
        return UNSURE
    driver_major, devices = read
    return decide(devices, driver_major, torch_cuda_major, constants.cuda_visible_devices())


def _read(nvml) -> tuple[int, list[tuple[str, str, int, int]]] | None:
    """(the driver's CUDA major version, [(name, uuid, major, minor)] in NVML order), or None on an error."""
    version = ctypes.c_int(0)
    if nvml.nvmlSystemGetCudaDriverVersion_v2(ctypes.byref(version)) != 0:
        return None
    count = ctypes.c_uint(0)
    if nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) != 0:
        return None
    devices = []
    for index in range(count.value):
        handle = ctypes.c_void_p()
        name = ctypes.create_string_buffer(_NAME_LEN)
        uuid = ctypes.create_string_buffer(_UUID_LEN)
        major, minor = ctypes.c_int(0), ctypes.c_int(0)
        if (
            nvml.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle)) != 0
            or nvml.nvmlDeviceGetName(handle, name, _NAME_LEN) != 0
            or nvml.nvmlDeviceGetUUID(handle, uuid, _UUID_LEN) != 0
            or nvml.nvmlDeviceGetCudaComputeCapability(handle, ctypes.byref(major), ctypes.byref(minor)) != 0
        ):
            return None
        devices.append((name.value.decode(), uuid.value.decode(), major.value, minor.value))
    return version.value // 1000, devices


def decide(
    devices: list[tuple[str, str, int, int]], driver_major: int, torch_cuda_major: int, spec: str | None
):
    """current_gpu's answer from what NVML reported, or UNSURE; `spec` is CUDA_VISIBLE_DEVICES."""
    if driver_major < torch_cuda_major:
        return UNSURE  # torch cannot use this driver; let torch say there is no device
    visible = visible_devices(spec, [d[1] for d in devices])
    if visible is None:
        return UNSURE
    kinds = {(devices[i][0], devices[i][2], devices[i][3]) for i in visible}
    if not kinds:
        return None
    if len(kinds) > 1:
        return UNSURE  # which one is current depends on CUDA's ordering and set_device
    return kinds.pop()


def visible_devices(spec: str | None, uuids: list[str]) -> list[int] | None:
    """NVML indices of the devices CUDA_VISIBLE_DEVICES=`spec` leaves visible, in its order, or None when
    the spec is one this module does not read with certainty (MIG instances, other forms). Like CUDA, an
    entry that names no device ends the list."""
    if spec is None:
        return list(range(len(uuids)))
    chosen: list[int] = []
    for entry in spec.split(","):
        entry = entry.strip()
        if entry.startswith("MIG-"):
            return None
        if entry.startswith("GPU-"):
            matches = [i for i, u in enumerate(uuids) if u.startswith(entry)]
            if len(matches) != 1:
                break
            index = matches[0]
        elif entry.lstrip("-").isdigit():
            index = int(entry)
            if not 0 <= index < len(uuids):
                break
        elif entry == "":
            break
        else:
            return None
        if index in chosen:
            return None
        chosen.append(index)
    return chosen
