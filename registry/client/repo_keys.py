"""Publisher keys shipped in the repo itself: `keys/<key id>.pub` on each version (the publisher writes them).

A `trust.KeySource` for hubs without our key route, the Hugging Face Hub among them. Whoever can write the
repo can change these files, as whoever runs a hub can change its key route: either way the first load pins
what it found, and later loads accept no other key (docs/CONTRACTS.md "Trust").
"""

from __future__ import annotations

from dataclasses import dataclass

from huggingface_hub.errors import HfHubHTTPError

from registry.spec.signing import KEYS_DIR, read_key_file

from .fetch import REPO_TYPE, Hub, fetch_files


@dataclass(frozen=True)
class RepoKeyFiles:
    """The `keys/*.pub` files at the loaded commit (none there: None)."""

    name: str = "repo key files"

    def keys(self, hub: Hub, repo_id: str, commit: str) -> list[str] | None:
        from huggingface_hub.hf_api import RepoFile  # 0.2 s to import: only when keys are looked up

        try:
            tree = hub.request(
                f"list the publisher keys of {repo_id}@{commit[:12]}",
                lambda: list(hub.api.list_repo_tree(repo_id, KEYS_DIR, repo_type=REPO_TYPE, revision=commit)),
            )
        except HfHubHTTPError as e:
            if e.response is not None and e.response.status_code == 404:
                return None
            raise
        paths = sorted(e.path for e in tree if isinstance(e, RepoFile) and e.path.endswith(".pub"))
        if not paths:
            return None
        fetch_files(hub, repo_id, commit, paths)
        snapshot = hub.repo_dir(repo_id) / "snapshots" / commit
        return [read_key_file(p, (snapshot / p).read_text()) for p in paths]
