"""Every environment variable kernel-hub reads, in one place (as huggingface_hub's `constants.py`).

Each variable has its name here and a function that reads it when called, not at import: a process sets
some of them for its workers or children (`serve`, `demo`) and tests set them per test. The kernel package
(`kernel_src/fused_mlp`) and the CUDA recipe (`build/cuda`) read their own: they run without kernel-hub.
Imports nothing of kernel-hub, so every part may use it.
"""

from __future__ import annotations

import os

_TRUE = {"1", "ON", "YES", "TRUE"}  # huggingface_hub's ENV_VARS_TRUE_VALUES


def _is_true(value: str | None) -> bool:
    return value is not None and value.upper() in _TRUE


def _get(name: str) -> str | None:
    """The variable's value; None when unset or empty."""
    return os.environ.get(name) or None


# The consumer: the same variables as huggingface_hub and kernels, read where kernel-hub talks to the hub itself.
HF_ENDPOINT = "HF_ENDPOINT"
HF_HUB_OFFLINE = "HF_HUB_OFFLINE"
HF_HUB_CACHE = "HF_HUB_CACHE"
KERNELS_CACHE = "KERNELS_CACHE"  # kernels' own cache folder, before HF_HUB_CACHE
LOCAL_KERNELS = "LOCAL_KERNELS"  # repo_id=folder[:...]: load from a folder on this machine (as kernels)
CUDA_VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"
# kernel-hub's own: trust and verification
PUBLISHER_KEYS = "KERNEL_HUB_PUBLISHER_KEYS"  # base64 ed25519 public keys, os.pathsep-separated
ALLOW_UNSIGNED = "KERNEL_HUB_ALLOW_UNSIGNED"  # exactly "1": accept builds with no signature at all
SIGSTORE_IDENTITIES = "KERNEL_HUB_SIGSTORE_IDENTITIES"  # workflow URIs, whitespace-separated
SIGSTORE_ROOT = "KERNEL_HUB_SIGSTORE_ROOT"  # a trusted_root.json
# The publisher
SIGNING_KEY = "KERNEL_HUB_KEY"  # the publisher's ed25519 private key file
CUDA_PYTHON = "KERNEL_HUB_CUDA_PYTHON"  # a python with a CUDA torch: headers and libraries for nvcc builds
CUDA_HOME = "CUDA_HOME"  # the CUDA toolkit nvcc builds use (as torch's cpp_extension)
MAX_JOBS = "MAX_JOBS"  # parallel compile jobs of an nvcc build (as torch's cpp_extension)
PATH = "PATH"  # an nvcc build's child process gets it with the toolkit's bin/ in front
XDG_STATE_HOME = "XDG_STATE_HOME"  # where a publish records its temporary branch until it is gone
# The hub server and its commands
HUB_DATA = "KERNEL_HUB_DATA"  # the hub's data directory (--data of serve and the admin commands)
HUB_DB = "KERNEL_HUB_DB"  # database URL (keeps a password out of the process list)
HUB_BLOBS = "KERNEL_HUB_BLOBS"  # blob store URL (s3://BUCKET[/PREFIX])
HEAD_TIMEOUT_S = "KERNEL_HUB_HEAD_TIMEOUT_S"  # set by `serve` for its spawned workers
SERVE_ARGS = "KERNEL_HUB_SERVE_ARGS"  # set by `serve` for its spawned workers: its options as JSON
AWS_ENDPOINT_URL = "AWS_ENDPOINT_URL"
AWS_REGION = "AWS_REGION"
AWS_DEFAULT_REGION = "AWS_DEFAULT_REGION"


def hf_endpoint() -> str | None:
    return _get(HF_ENDPOINT)


def hf_hub_offline() -> bool:
    return _is_true(os.environ.get(HF_HUB_OFFLINE, ""))


def kernels_cache() -> str | None:
    """`$KERNELS_CACHE`, else `$HF_HUB_CACHE`, else None (huggingface_hub's default then)."""
    return _get(KERNELS_CACHE) or _get(HF_HUB_CACHE)


def local_kernels() -> str | None:
    return _get(LOCAL_KERNELS)


def cuda_visible_devices() -> str | None:
    """As set, empty included: an empty value hides every device."""
    return os.environ.get(CUDA_VISIBLE_DEVICES)


def publisher_keys() -> list[str] | None:
    """The keys in `$KERNEL_HUB_PUBLISHER_KEYS`; None when it is unset or empty."""
    value = _get(PUBLISHER_KEYS)
    return None if value is None else [i for i in value.split(os.pathsep) if i.strip()]


def allow_unsigned() -> bool:
    return os.environ.get(ALLOW_UNSIGNED) == "1"


def sigstore_identities() -> list[str]:
    return os.environ.get(SIGSTORE_IDENTITIES, "").split()


def sigstore_root() -> str | None:
    return _get(SIGSTORE_ROOT)


def signing_key() -> str | None:
    return _get(SIGNING_KEY)


def cuda_python() -> str | None:
    return _get(CUDA_PYTHON)


def cuda_home() -> str | None:
    return _get(CUDA_HOME)


def max_jobs(default: str) -> str:
    return _get(MAX_JOBS) or default


def search_path() -> str:
    return os.environ.get(PATH, "")


def xdg_state_home() -> str | None:
    return _get(XDG_STATE_HOME)


def hub_data() -> str | None:
    return _get(HUB_DATA)


def hub_db() -> str | None:
    return os.environ.get(HUB_DB)


def hub_blobs() -> str | None:
    return os.environ.get(HUB_BLOBS)


def head_timeout_s(default: float) -> float:
    return float(os.environ.get(HEAD_TIMEOUT_S, default))


def serve_args() -> str:
    """The JSON `serve` left for its workers; KeyError outside a worker."""
    return os.environ[SERVE_ARGS]


def aws_endpoint_url() -> str | None:
    return _get(AWS_ENDPOINT_URL)


def aws_region(default: str) -> str:
    return _get(AWS_REGION) or _get(AWS_DEFAULT_REGION) or default
