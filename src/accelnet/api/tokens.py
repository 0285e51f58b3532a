"""Bearer tokens: ``acn_<id>_<secret>``, stored as the SHA-256 of the secret.

A token belongs to one tenant and has one role (:class:`Role`). The secret (32 random
bytes, hex) is shown once, when the token is created; the table keeps its hash, so a copy
of the database grants nothing. The id (12 hex digits) is what logs and the audit log name.
A revoked token stops working at its next request (the table is read on every request, so
``accelnet token revoke`` in another process takes effect at once), and the streams it
opened end within a second (:mod:`accelnet.api.streams` asks :meth:`Tokens.active`).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from enum import StrEnum

from accelnet.api.db import ApiDb

PREFIX = "acn"
_TOKEN = re.compile(r"^acn_([0-9a-f]{12})_([0-9a-f]{64})$")
NAME_PATTERN = r"^[\w][\w.-]*$"
_NAME = re.compile(NAME_PATTERN)


class Role(StrEnum):
    """What a token may do; each role may do everything the ones below it may."""

    VIEWER = "viewer"  # read its tenant's jobs, devices, fabric, policy, quotas, events
    USER = "user"  # and submit / cancel its tenant's jobs
    ADMIN = "admin"  # everything, every tenant

    @property
    def rank(self) -> int:
        """0 viewer, 1 user, 2 admin."""
        return list(Role).index(self)

    def allows(self, needed: Role) -> bool:
        """Whether this role may do what ``needed`` may."""
        return self.rank >= needed.rank


@dataclass(frozen=True, slots=True)
class Principal:
    """Who makes a request: a token's id, tenant and role (never its secret)."""

    token_id: str
    tenant: str
    role: Role
    name: str = ""

    @property
    def admin(self) -> bool:
        """Whether it sees and may change everything."""
        return self.role is Role.ADMIN


@dataclass(frozen=True, slots=True)
class TokenInfo:
    """A stored token, without its secret."""

    id: str
    tenant: str
    role: Role
    name: str
    created_at: float
    revoked_at: float | None

    @property
    def active(self) -> bool:
        """Not revoked."""
        return self.revoked_at is None


def hash_secret(secret: str) -> str:
    """SHA-256 of the secret, hex."""
    return hashlib.sha256(secret.encode()).hexdigest()


def parse_token(text: str) -> tuple[str, str] | None:
    """``(id, secret)`` of a well-formed token string, else None."""
    found = _TOKEN.match(text.strip())
    return (found.group(1), found.group(2)) if found else None


def check_name(value: str, what: str) -> str:
    """``value`` if it is a valid tenant or token name (letters, digits, ``_.-``, at most
    64), else ValueError naming ``what``."""
    if not (_NAME.match(value) and len(value) <= 64):
        raise ValueError(f"{what} {value!r}: letters, digits, '_', '.', '-' (at most 64)")
    return value


class Tokens:
    """The token table."""

    def __init__(self, db: ApiDb) -> None:
        self._db = db

    def create(self, tenant: str, role: Role, name: str, now: float) -> tuple[TokenInfo, str]:
        """A new token; returns it and the token string (the only time the secret is
        known). ValueError for a bad tenant or name."""
        check_name(tenant, "tenant")
        if name:
            check_name(name, "token name")
        token_id, secret = secrets.token_hex(6), secrets.token_hex(32)
        self._db.insert(
            "INSERT INTO api_tokens(id, tenant, role, name, secret_sha256, created_at) "
            "VALUES(?,?,?,?,?,?)",
            (token_id, tenant, role.value, name, hash_secret(secret), now),
        )
        info = TokenInfo(token_id, tenant, role, name, now, None)
        return info, f"{PREFIX}_{token_id}_{secret}"

    def list(self) -> list[TokenInfo]:
        """Every token (revoked ones too), oldest first."""
        rows = self._db.query(
            "SELECT id, tenant, role, name, created_at, revoked_at FROM api_tokens "
            "ORDER BY created_at, id"
        )
        return [TokenInfo(r[0], r[1], Role(r[2]), r[3], r[4], r[5]) for r in rows]

    def revoke(self, token_id: str, now: float) -> bool:
        """Revoke a token; False if there is no active token with that id."""
        changed = self._db.write(
            "UPDATE api_tokens SET revoked_at=? WHERE id=? AND revoked_at IS NULL",
            (now, token_id),
        )
        return changed > 0

    def active(self, token_id: str) -> bool:
        """Whether the token ``token_id`` exists and is not revoked (one indexed read; what
        an open stream asks again and again, so a revocation ends it)."""
        rows = self._db.query("SELECT revoked_at FROM api_tokens WHERE id=?", (token_id,))
        return bool(rows) and rows[0][0] is None

    def authenticate(self, text: str) -> Principal | None:
        """The principal of a valid, active token string; None otherwise (malformed,
        unknown, wrong secret, revoked). The comparison takes constant time."""
        parsed = parse_token(text)
        if parsed is None:
            return None
        token_id, secret = parsed
        rows = self._db.query(
            "SELECT tenant, role, name, secret_sha256, revoked_at FROM api_tokens WHERE id=?",
            (token_id,),
        )
        if not rows:
            return None
        tenant, role, name, digest, revoked = rows[0]
        if not hmac.compare_digest(hash_secret(secret), digest) or revoked is not None:
            return None
        return Principal(token_id, tenant, Role(role), name)
