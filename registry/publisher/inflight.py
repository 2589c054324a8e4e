"""The temporary branches of this machine's publishes, recorded while they run, so that the next publish
removes the ones an interrupted publish left (Ctrl-C twice, a killed process, a hub that stayed away
longer than the cleanup's retries), however young they are.

Another machine's branch stays until it is `names.STALE_PUBLISH_S` old (publish.remove_stale_publish_branches,
`kernel-hub gc`): only this machine can tell that its own publisher is gone. A record is one JSON file in
`$XDG_STATE_HOME/kernel-hub/publishes/` (default ~/.local/state), written before the branch is created and
removed once the branch is gone.
"""

from __future__ import annotations

import json
import os
import socket
import uuid
from pathlib import Path

from registry import constants
from registry.atomic import write_atomic

_LIVE: set[str] = set()  # records of publishes running in this process right now


def _folder() -> Path:
    base = constants.xdg_state_home() or Path.home() / ".local" / "state"
    return Path(base) / "kernel-hub" / "publishes"


def start(endpoint: str, repo_id: str, branch: str) -> Path:
    """Record a publish's temporary branch before it exists; returns the record (pass it to `done`)."""
    path = _folder() / f"{os.getpid()}-{uuid.uuid4().hex[:12]}.json"
    body = {
        "endpoint": endpoint,
        "repo": repo_id,
        "branch": branch,
        "pid": os.getpid(),
        "host": socket.gethostname(),
    }
    write_atomic(path, json.dumps(body).encode())
    _LIVE.add(str(path))
    return path


def done(record: Path) -> None:
    """The branch is gone: forget it."""
    _LIVE.discard(str(record))
    record.unlink(missing_ok=True)


def ended(record: Path) -> None:
    """This publish is over, whether or not its branch is gone: a record still there is an orphan."""
    _LIVE.discard(str(record))


def orphans(endpoint: str, repo_id: str) -> list[tuple[Path, str]]:
    """(record, branch) of this machine's publishes to `repo_id` on `endpoint` whose process is gone."""
    out = []
    for path in sorted(_folder().glob("*.json")):
        try:
            body = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if (body.get("endpoint"), body.get("repo"), body.get("host")) != (
            endpoint,
            repo_id,
            socket.gethostname(),
        ):
            continue
        if str(path) in _LIVE or _alive(body.get("pid")):
            continue
        out.append((path, str(body.get("branch"))))
    return out


def _alive(pid) -> bool:
    if not isinstance(pid, int):
        return False
    if pid == os.getpid():
        return False  # this process, but not among its running publishes: an interrupted one
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's live process
    return True
