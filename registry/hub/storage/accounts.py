"""Who may do what: tokens (stored as sha256 hashes), orgs with members and the trusted flag,
publisher keys, and the server's signing secret for LFS upload URLs.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import time
from dataclasses import dataclass, field

from sqlalchemy import Engine, delete, func, insert, select, update
from sqlalchemy.exc import IntegrityError

from registry.spec import signing

from ..errors import HubError
from . import db
from .rowcache import RowCache


def _key_entry(row) -> dict:
    entry = {"id": row.key_id, "public_key": row.public_key}
    if row.endorsed_by:
        entry.update(endorsed_by=row.endorsed_by, endorsement=row.endorsement)
    return entry


def _check_endorsement(
    namespace: str, public: str, current: dict[str, str], endorsed_by: str | None, endorsement: str | None
) -> None:
    """Refuse (KeyNotAllowed) a further key of `namespace` unless a current key signed it in."""
    kid = signing.key_id(public)
    listed = ", ".join(current)
    if endorsed_by is None or not isinstance(endorsement, str):
        raise HubError(
            "KeyNotAllowed",
            f"{namespace} already signs with publisher key(s) {listed}, and key {kid} was not added on purpose: "
            f"publish with the team's key (`kernel-hub key export {namespace}` where it lives, `kernel-hub key "
            f"import {namespace} FILE` here), or add this key by a rotation signed with a current key "
            f"(`kernel-hub key rotate {namespace} --new-key FILE`) or by a hub admin (`kernel-hub key add`)",
        )
    if endorsed_by not in current:
        raise HubError(
            "KeyNotAllowed",
            f"key {kid} is endorsed by key {endorsed_by}, which is not a key of {namespace} ({listed}); "
            "sign the rotation with a current key",
        )
    try:
        signing.verify_endorsement(namespace, public, current[endorsed_by], endorsement)
    except signing.SignatureError as e:
        raise HubError("KeyNotAllowed", f"{e}; sign the rotation with that key's private half") from None


@dataclass(frozen=True)
class Principal:
    """The caller behind a token: a user and the namespaces it may write to."""

    user: str
    write_namespaces: frozenset[str] = field(default_factory=frozenset)

    def can_write(self, namespace: str) -> bool:
        return namespace == self.user or namespace in self.write_namespaces


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class Accounts:
    def __init__(self, engine: Engine):
        self.engine = engine
        self._rows = RowCache(engine)

    # --- tokens ----------------------------------------------------------------------------------
    def create_token(self, user: str, write: list[str]) -> str:
        """A new token for `user`; only its hash is stored, so it is shown once."""
        token = "hf_" + secrets.token_urlsafe(30).replace("-", "a").replace("_", "b")
        with db.write_tx(self.engine) as c:
            c.execute(
                insert(db.tokens).values(
                    hash=token_hash(token),
                    user=user,
                    write_namespaces=json.dumps(sorted(set(write))),
                    created_at=time.time(),
                )
            )
        return token

    def principal(self, token: str) -> Principal | None:
        """The principal of a token (user + explicit namespaces + orgs it belongs to), or None."""
        return self._rows.get(("token", token_hash(token)), lambda: self._principal(token))

    def _principal(self, token: str) -> Principal | None:
        with db.read_tx(self.engine) as c:
            row = c.execute(select(db.tokens).where(db.tokens.c.hash == token_hash(token))).first()
            if not row:
                return None
            orgs = (
                c.execute(select(db.org_members.c.org).where(db.org_members.c.user == row.user))
                .scalars()
                .all()
            )
        return Principal(row.user, frozenset(json.loads(row.write_namespaces)) | frozenset(orgs))

    def tokens(self) -> list[dict]:
        """Every token as `{"id", "user", "write", "created_at"}`; `id` = the first 12 hex of its hash."""
        with db.read_tx(self.engine) as c:
            rows = c.execute(select(db.tokens).order_by(db.tokens.c.created_at)).all()
        return [
            {
                "id": r.hash[:12],
                "user": r.user,
                "write": json.loads(r.write_namespaces),
                "created_at": r.created_at,
            }
            for r in rows
        ]

    def revoke_token(self, token_or_id: str) -> dict:
        """Delete one token, named by itself or by a unique prefix (>= 8 hex) of its id; returns what was deleted.

        HubError NotFound when nothing or more than one token matches.
        """
        is_token = token_or_id.startswith("hf_")
        prefix = token_hash(token_or_id) if is_token else token_or_id.lower()
        if not is_token and (len(prefix) < 8 or any(ch not in "0123456789abcdef" for ch in prefix)):
            raise HubError("BadRequest", f"{token_or_id!r} is no token id: give at least 8 hex digits of one")
        with db.write_tx(self.engine) as c:
            rows = c.execute(select(db.tokens).where(db.tokens.c.hash.startswith(prefix))).all()
            if len(rows) != 1:
                raise HubError(
                    "NotFound",
                    f"{'no' if not rows else len(rows)} token(s) match {token_or_id[:16]!r}"
                    + ("; give more digits of the id" if rows else ""),
                )
            c.execute(delete(db.tokens).where(db.tokens.c.hash == rows[0].hash))
        return {"id": rows[0].hash[:12], "user": rows[0].user}

    def user_orgs(self, user: str) -> list[str]:
        with db.read_tx(self.engine) as c:
            return list(
                c.execute(select(db.org_members.c.org).where(db.org_members.c.user == user)).scalars()
            )

    # --- orgs ------------------------------------------------------------------------------------
    def create_org(self, name: str, trusted: bool, members: list[str]) -> None:
        """Create the org, or update its trusted flag and add members if it exists (idempotent)."""
        with db.write_tx(self.engine) as c:
            exists = c.execute(select(db.orgs.c.name).where(db.orgs.c.name == name)).scalar()
            if exists:
                c.execute(update(db.orgs).where(db.orgs.c.name == name).values(trusted=trusted))
            else:
                c.execute(insert(db.orgs).values(name=name, trusted=trusted, created_at=time.time()))
            have = set(c.execute(select(db.org_members.c.user).where(db.org_members.c.org == name)).scalars())
            for m in sorted(set(members) - have):
                c.execute(insert(db.org_members).values(org=name, user=m))

    def orgs(self) -> list[dict]:
        """Every org as `{"name", "trusted", "members"}` (members: how many)."""
        count = select(func.count()).where(db.org_members.c.org == db.orgs.c.name).scalar_subquery()
        with db.read_tx(self.engine) as c:
            rows = c.execute(
                select(db.orgs.c.name, db.orgs.c.trusted, count.label("n")).order_by(db.orgs.c.name)
            )
            return [{"name": r.name, "trusted": bool(r.trusted), "members": r.n} for r in rows]

    def remove_members(self, name: str, members: list[str]) -> list[str]:
        """Take `members` out of org `name`; returns those who were in it."""
        with db.write_tx(self.engine) as c:
            have = set(c.execute(select(db.org_members.c.user).where(db.org_members.c.org == name)).scalars())
            gone = sorted(have & set(members))
            if gone:
                c.execute(
                    delete(db.org_members).where(
                        db.org_members.c.org == name, db.org_members.c.user.in_(gone)
                    )
                )
        return gone

    def org(self, name: str) -> dict | None:
        with db.read_tx(self.engine) as c:
            row = c.execute(select(db.orgs).where(db.orgs.c.name == name)).first()
            if not row:
                return None
            members = (
                c.execute(select(db.org_members.c.user).where(db.org_members.c.org == name)).scalars().all()
            )
        return {"name": row.name, "trusted": bool(row.trusted), "members": sorted(members)}

    # --- publisher keys ----------------------------------------------------------------------------
    def add_key(
        self,
        namespace: str,
        public_key_b64: str,
        *,
        on_purpose: bool = False,
        endorsed_by: str | None = None,
        endorsement: str | None = None,
    ) -> str:
        """Register an ed25519 public key (base64 of the raw 32 bytes); returns its id.

        A namespace's first key is taken as it comes (first use); any further key only on purpose: from the
        admin command (`on_purpose`), or endorsed by a current key of the namespace (a signed rotation).
        Otherwise KeyNotAllowed: a second machine publishing with its own fresh key must not silently split
        what consumers trust.
        """
        try:
            raw = base64.b64decode(public_key_b64, validate=True)
        except (ValueError, TypeError):
            raw = b""
        if len(raw) != 32:
            raise HubError(
                "BadRequest",
                "public_key must be the base64 of a raw 32-byte ed25519 public key "
                f"(got {len(raw)} bytes after decoding)",
            )
        public = base64.b64encode(raw).decode()
        key_id = signing.key_id(public)
        try:
            with db.write_tx(self.engine) as c:
                rows = c.execute(select(db.keys).where(db.keys.c.namespace == namespace)).all()
                current = {r.key_id: r.public_key for r in rows}
                if key_id in current:
                    return key_id  # the same key registered again: nothing to change
                if current and not on_purpose:
                    _check_endorsement(namespace, public, current, endorsed_by, endorsement)
                else:
                    endorsed_by = endorsement = None
                c.execute(
                    insert(db.keys).values(
                        namespace=namespace,
                        key_id=key_id,
                        public_key=public,
                        created_at=time.time(),
                        endorsed_by=endorsed_by,
                        endorsement=endorsement,
                    )
                )
        except IntegrityError:
            pass  # registered by a concurrent request meanwhile
        return key_id

    def keys(self, namespace: str) -> list[dict]:
        """`{"id", "public_key"}` per key of `namespace`, oldest first; `endorsed_by` + `endorsement` for rotations."""
        with db.read_tx(self.engine) as c:
            rows = c.execute(
                select(db.keys).where(db.keys.c.namespace == namespace).order_by(db.keys.c.created_at)
            ).all()
        return [_key_entry(r) for r in rows]

    def all_keys(self) -> list[dict]:
        """Every publisher key as `{"namespace", "id", "public_key", "created_at"}`."""
        with db.read_tx(self.engine) as c:
            rows = c.execute(select(db.keys).order_by(db.keys.c.namespace, db.keys.c.created_at)).all()
        return [{"namespace": r.namespace, "created_at": r.created_at, **_key_entry(r)} for r in rows]

    def revoke_key(self, namespace: str, key_id: str) -> bool:
        """Remove a publisher key of `namespace`; False when it was not registered."""
        with db.write_tx(self.engine) as c:
            gone = c.execute(
                delete(db.keys).where(db.keys.c.namespace == namespace, db.keys.c.key_id == key_id)
            )
        return gone.rowcount > 0

    # --- server secret -------------------------------------------------------------------------------
    def secret(self) -> bytes:
        """The HMAC key for signed LFS upload URLs, shared by every process on this database."""
        query = select(db.settings.c.value).where(db.settings.c.key == "lfs_secret")
        try:
            with db.write_tx(self.engine) as c:
                value = c.execute(query).scalar()
                if value is None:
                    value = secrets.token_hex(32)
                    c.execute(insert(db.settings).values(key="lfs_secret", value=value))
        except IntegrityError:  # another replica starting at the same moment made it first: use that one
            with db.read_tx(self.engine) as c:
                value = c.execute(query).scalar()
        return bytes.fromhex(value)
