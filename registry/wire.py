"""The wire client: what kernel-hub asks of a hub that speaks the Hugging Face Hub API, for the consumer
(`registry/client`), the publisher and the matrix alike.

huggingface_hub's `HfApi` serves the standard routes; it is imported on first use (0.2 s that a cached
load never needs), so refs, revisions and kernel-hub's extension routes (docs/HUB_PROTOCOL.md) are asked
directly through huggingface_hub's shared session. Errors are huggingface_hub's (`hf_raise_for_status`):
what a 404 or an unreachable hub means to a load, a publish or a matrix, the caller decides.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from httpx2 import Response
from huggingface_hub import constants as hf_constants
from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

from registry import constants
from registry.errors import KernelHubError
from registry.spec.names import KERNEL_REPO_TYPE, versions

REPO_TYPE = KERNEL_REPO_TYPE
KEYS_ROUTE = "api/kernel-hub/keys"  # GET: a namespace's publisher keys; POST: register or rotate one
# A 404/405 on an extension route means "this server lacks the extension", unless it names a missing
# revision or file. RepoNotFound is not trusted here: some servers answer unknown API routes with it, and
# the repo was just seen; were it really gone, the Hub-API fallback fails with a precise error anyway.
_REAL_404_CODES = {"RevisionNotFound", "EntryNotFound"}


class VersionNotFound(KernelHubError, LookupError):
    """The repo has no branch `v<version>`; `have` lists the versions it has."""

    def __init__(self, repo_id: str, version: int, found: dict[int, str]):
        self.version = version
        self.have = ", ".join(f"v{n}" for n in sorted(found)) or "none"
        super().__init__(f"{repo_id} has no version {version} (branch v{version}); versions: {self.have}")


def pick_version(repo_id: str, found: dict[int, str], version: int) -> str:
    """The head commit of `v<version>` among a repo's versions `found`; VersionNotFound lists them."""
    if version not in found:
        raise VersionNotFound(repo_id, version, found)
    return found[version]


def extension_answered(r: Response) -> bool:
    """False when the server lacks the extension route (a 404/405 that names no missing revision or file);
    raises the hub's error for any other failure; True for a success."""
    if r.status_code in (404, 405) and r.headers.get("X-Error-Code") not in _REAL_404_CODES:
        return False
    hf_raise_for_status(r)
    return True


def said(r: Response) -> str:
    """The hub's own message in an error answer, in one line: its JSON `error`, else `X-Error-Message`, else the
    body's first line (a proxy's HTML page is not repeated whole)."""
    try:
        body = r.json()
    except ValueError:
        body = None
    message = body.get("error") if isinstance(body, dict) else None
    message = message or r.headers.get("X-Error-Message") or r.text.strip().split("\n")[0] or r.reason_phrase
    return " ".join(str(message).split())[:300]


@dataclass
class HubClient:
    """One hub on the wire: its endpoint and the token every request carries."""

    endpoint: str
    token: str | None

    @classmethod
    def at(cls, endpoint: str | None, token: str | None) -> HubClient:
        """The hub at `endpoint`, else `$HF_ENDPOINT`, else huggingface_hub's default."""
        return cls(resolve_endpoint(endpoint), token)

    @functools.cached_property
    def api(self):
        """huggingface_hub's HfApi for this hub (the standard routes)."""
        from huggingface_hub import HfApi

        return HfApi(endpoint=self.endpoint, token=self.token)

    def get(self, url: str, **kwargs) -> Response:
        """GET `url` with the token's headers; HTTP errors raise huggingface_hub's errors."""
        response = get_session().get(url, headers=build_hf_headers(token=self.token), **kwargs)
        hf_raise_for_status(response)
        return response

    def post(self, route: str, body: dict) -> Response:
        """POST JSON to `<endpoint>/<route>`; the answer as it is (extension routes: see `extension_answered`)."""
        return get_session().post(
            f"{self.endpoint}/{route}", json=body, headers=build_hf_headers(token=self.token)
        )

    def repo_url(self, repo_id: str) -> str:
        return f"{self.endpoint}/api/{REPO_TYPE}s/{repo_id}"

    def namespace_url(self, route: str, namespace: str) -> str:
        """`<endpoint>/<route>/<namespace>` with the namespace quoted (the key and org routes)."""
        return f"{self.endpoint}/{route}/{quote(namespace, safe='')}"

    def branch_heads(self, repo_id: str) -> dict[str, str]:
        """Every branch -> its head commit (the route HfApi.list_repo_refs calls)."""
        refs = self.get(f"{self.repo_url(repo_id)}/refs").json()
        return {b["name"]: b["targetCommit"] for b in refs.get("branches", [])}

    def version_heads(self, repo_id: str) -> dict[int, str]:
        """Every canonical version branch `vN` -> its head commit (`v01` is not a version: spec.names)."""
        return versions(self.branch_heads(repo_id))

    def version_commit(self, repo_id: str, version: int) -> str:
        """Head commit of branch `v<version>`; VersionNotFound lists the versions that exist."""
        return pick_version(repo_id, self.version_heads(repo_id), version)

    def revision_commit(self, repo_id: str, revision: str) -> str:
        """The commit a branch, tag or commit names (the route HfApi.repo_info calls)."""
        return self.get(f"{self.repo_url(repo_id)}/revision/{quote(revision, safe='')}").json()["sha"]

    def folder_names(self, repo_id: str, path: str, revision: str) -> list[str]:
        """Names of the folders directly under `path` at `revision`, sorted."""
        from huggingface_hub.hf_api import RepoFolder

        entries = self.api.list_repo_tree(repo_id, path, revision=revision, repo_type=REPO_TYPE)
        return sorted(e.path.rsplit("/", 1)[-1] for e in entries if isinstance(e, RepoFolder))

    def file_paths(self, repo_id: str, path: str, revision: str, suffix: str = "") -> list[str]:
        """Repo paths of the files directly under `path` at `revision` whose names end in `suffix`, sorted."""
        from huggingface_hub.hf_api import RepoFile

        entries = self.api.list_repo_tree(repo_id, path, revision=revision, repo_type=REPO_TYPE)
        return sorted(e.path for e in entries if isinstance(e, RepoFile) and e.path.endswith(suffix))

    def tree(self, repo_id: str, revision: str) -> dict:
        """Every file of the repo at `revision`: path -> huggingface_hub's RepoFile (size, blob id, LFS)."""
        from huggingface_hub.hf_api import RepoFile

        entries = self.api.list_repo_tree(repo_id, revision=revision, recursive=True, repo_type=REPO_TYPE)
        return {e.path: e for e in entries if isinstance(e, RepoFile)}

    def file_url(self, repo_id: str, path: str, revision: str) -> str:
        from huggingface_hub import hf_hub_url

        return hf_hub_url(repo_id, path, repo_type=REPO_TYPE, revision=revision, endpoint=self.endpoint)

    def download(self, repo_id: str, path: str, revision: str, cache_dir: Path | str | None = None) -> Path:
        """One file through huggingface_hub's cache (`cache_dir`, else its default); its local path."""
        from huggingface_hub import hf_hub_download

        local = hf_hub_download(
            repo_id,
            path,
            repo_type=REPO_TYPE,
            revision=revision,
            cache_dir=cache_dir,
            endpoint=self.endpoint,
            token=self.token,
        )
        return Path(local)

    def snapshot(self, repo_id: str, revision: str, local_dir: Path | str) -> Path:
        """Every file of the repo at `revision`, downloaded into `local_dir` (huggingface_hub's snapshot); the folder."""
        from huggingface_hub import snapshot_download

        folder = snapshot_download(
            repo_id,
            repo_type=REPO_TYPE,
            revision=revision,
            local_dir=local_dir,
            endpoint=self.endpoint,
            token=self.token,
        )
        return Path(folder)

    def namespace_keys(self, namespace: str) -> list[dict] | None:
        """The hub's publisher keys of `namespace` (`id`, `public_key`, and `endorsed_by` + `endorsement` for a
        rotation); None: the hub has no key route."""
        r = get_session().get(
            self.namespace_url(KEYS_ROUTE, namespace), headers=build_hf_headers(token=self.token)
        )
        if not extension_answered(r):
            return None
        return [k for k in r.json().get("keys", []) if isinstance(k, dict)]


def resolve_endpoint(endpoint: str | None) -> str:
    """`endpoint`, else `$HF_ENDPOINT` (read now), else huggingface_hub's default; no trailing slash."""
    return (endpoint or constants.hf_endpoint() or hf_constants.ENDPOINT).rstrip("/")
