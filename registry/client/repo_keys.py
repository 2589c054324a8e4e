"""Publisher keys shipped in the repo itself: `keys/<key id>.pub` on each version (the publisher writes them).

A `trust.KeySource` for hubs without our key route, the Hugging Face Hub among them. Whoever can write the
repo can change these files, as whoever runs a hub can change its key route: either way the first load pins
what it found, and later loads accept no other key (docs/CONTRACTS.md "Trust").
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from huggingface_hub.errors import HfHubHTTPError

from registry.spec.signing import KEYS_DIR, read_key_file

from .fetch import Hub, fetch_files


@dataclass(frozen=True)
class RepoKeyFiles:
    """The `keys/*.pub` files at the loaded commit (none there: None)."""

    name: str = "repo key files"

    def keys(self, hub: Hub, repo_id: str, commit: str) -> list[str] | None:
        try:
            paths = hub.request(
                f"list the publisher keys of {repo_id}@{commit[:12]}",
                hub.file_paths,
                repo_id,
                KEYS_DIR,
                commit,
                ".pub",
            )
        except HfHubHTTPError as e:
            if e.response is not None and e.response.status_code == 404:
                return None
            raise
        if not paths:
            return None
        fetch_files(hub, repo_id, commit, paths)
        snapshot = hub.repo_dir(repo_id) / "snapshots" / commit
        return [read_key_file(p, (snapshot / p).read_text()) for p in paths]

    def endorsements(self, hub: Hub, repo_id: str, commit: str) -> list[dict]:
        """The rotation links the version ships (`keys/<id>.endorsement`: JSON lists, oldest link first)."""
        try:
            paths = hub.request(
                f"list the key endorsements of {repo_id}@{commit[:12]}",
                hub.file_paths,
                repo_id,
                KEYS_DIR,
                commit,
                ".endorsement",
            )
        except HfHubHTTPError:
            return []
        if not paths:
            return []
        fetch_files(hub, repo_id, commit, paths)
        snapshot = hub.repo_dir(repo_id) / "snapshots" / commit
        links = []
        for p in paths:
            try:
                chain = json.loads((snapshot / p).read_text())
            except (OSError, ValueError):
                continue
            links += [link for link in chain if isinstance(link, dict)] if isinstance(chain, list) else []
        return links
