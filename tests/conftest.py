"""Shared fixtures. `hub`: a real `kernel-hub serve` process on 127.0.0.1 (session scope);
`plain_hub`: the same with `--no-extensions` (the HF Hub API only, as the real Hub);
`hub_env`: points the stock clients at `hub` with a fresh cache (docs/CONTRACTS.md).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hub_process import REPO_ROOT, HubProcess  # noqa: F401  (re-exported for tests)


@pytest.fixture(scope="session")
def hub(tmp_path_factory):
    """A real hub on 127.0.0.1 for the whole session (pages of 100 entries, so pagination is exercised)."""
    proc = HubProcess(tmp_path_factory.mktemp("hub") / "data", "--page-size", "100").start()
    yield proc
    proc.stop()


@pytest.fixture(scope="session")
def plain_hub(tmp_path_factory):
    """A real hub that answers only the HF Hub API (`serve --no-extensions`): no key routes, no ref-update."""
    proc = HubProcess(tmp_path_factory.mktemp("plain-hub") / "data", "--no-extensions").start()
    yield proc
    proc.stop()


def point_clients_at(mp: pytest.MonkeyPatch, url: str, workdir: Path) -> dict[str, str]:
    """Point huggingface_hub and kernels at `url` with a fresh cache under `workdir` (through `mp`).

    huggingface_hub reads its environment once at import, so its constants are patched too.
    Telemetry stays on: HF_HUB_DISABLE_TELEMETRY=1 breaks kernels 0.17.2 (docs/HUB_PROTOCOL.md §9.1).
    """
    home = workdir / "hf-home"
    values = {
        "HF_ENDPOINT": url,
        "HF_HOME": str(home),
        "HF_HUB_CACHE": str(home / "hub"),
        "KERNELS_CACHE": str(workdir / "kernels-cache"),
    }
    for k, v in values.items():
        mp.setenv(k, v)
    for k in (
        "HF_HUB_DISABLE_TELEMETRY",
        "DISABLE_TELEMETRY",
        "HF_HUB_OFFLINE",
        "HF_HUB_DISABLE_XET",
        "HF_TOKEN",
    ):
        mp.delenv(k, raising=False)
    from huggingface_hub import constants

    patches = {
        "ENDPOINT": url,
        "HUGGINGFACE_CO_URL_TEMPLATE": url + "/{repo_id}/resolve/{revision}/{filename}",
        "HF_URL_HOSTS": constants.HF_URL_HOSTS | {"127.0.0.1"},
        "HF_HOME": str(home),
        "HF_HUB_CACHE": str(home / "hub"),
        "HF_TOKEN_PATH": str(home / "token"),
        "HF_STORED_TOKENS_PATH": str(home / "stored_tokens"),
        "HF_HUB_DISABLE_TELEMETRY": False,
        "HF_HUB_OFFLINE": False,
        "HF_HUB_DISABLE_XET": False,
    }
    for k, v in patches.items():
        mp.setattr(constants, k, v, raising=False)
    return values


@pytest.fixture
def hub_env(monkeypatch, hub, tmp_path):
    """Stock clients pointed at `hub` with a fresh cache; xet and telemetry at their defaults."""
    return point_clients_at(monkeypatch, hub.url, tmp_path)
