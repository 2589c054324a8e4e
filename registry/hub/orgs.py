"""Account routes: org overview with `trustedKernelPublisher` (every namespace answers, users too),
whoami-v2, agent-harnesses, and the publisher-key extension. docs/HUB_PROTOCOL.md §2 and §5.
"""

from __future__ import annotations

from . import validate
from .errors import HubError
from .routing import route
from .web import Call, ok


def overview(call: Call):
    ns = call.p["ns"]
    org = call.hub.accounts.org(ns)
    return ok(
        {
            "name": ns,
            "fullname": ns,
            "avatarUrl": "",
            "type": "org" if org else "user",
            "isEnterprise": False,
            "numMembers": len(org["members"]) if org else 1,
            "trustedKernelPublisher": bool(org and org["trusted"]),
        }
    )


def whoami(call: Call):
    who = call.require_user()
    orgs = call.hub.accounts.user_orgs(who.user)
    return ok(
        {
            "type": "user",
            "id": who.user,
            "name": who.user,
            "fullname": who.user,
            "orgs": [{"type": "org", "name": o, "fullname": o, "roleInOrg": "write"} for o in orgs],
            "auth": {
                "type": "access_token",
                "accessToken": {"displayName": "kernel-hub token", "role": "write"},
            },
            "canWrite": sorted({who.user, *who.write_namespaces}),
        }
    )


def agent_harnesses(call: Call):
    return ok({"standardEnvVars": [], "harnesses": {}})


def list_keys(call: Call):
    return ok({"keys": call.hub.accounts.keys(call.p["ns"])})


def add_key(call: Call):
    ns = validate.namespace(call.p["ns"])
    call.require_write(ns)
    body = call.json()
    key = body.get("public_key")
    if not isinstance(key, str):
        raise HubError("BadRequest", "'public_key' must be the base64 of a raw 32-byte ed25519 public key")
    endorsed_by, endorsement = body.get("endorsed_by"), body.get("endorsement")
    if endorsed_by is not None and not isinstance(endorsed_by, str):
        raise HubError("BadRequest", "'endorsed_by' must be the id of a current key of the namespace")
    kid = call.hub.accounts.add_key(ns, key, endorsed_by=endorsed_by, endorsement=endorsement)
    return ok({"id": kid})


ROUTES = [
    route("GET", "api/organizations/{ns}/overview", overview),
    route("GET", "api/whoami-v2", whoami),
    route("GET", "api/agent-harnesses", agent_harnesses),
    route("GET", "api/kernel-hub/keys/{ns}", list_keys),
    route("POST", "api/kernel-hub/keys/{ns}", add_key),
]
