"""Bearer tokens the devcluster knows: the admin token of its kubeconfig and the ServiceAccount
tokens it issues through TokenRequest (`kubectl create token`).

`reviews.py` calls `issue` and `authenticate`. Tokens live only in memory, keyed by their
SHA-256; one stops authenticating when it expires or when its ServiceAccount is deleted (or
replaced by another of the same name). Tokens never reach a log line or the request log.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

API_AUDIENCE = "https://kubernetes.default.svc.cluster.local"
ISSUER = API_AUDIENCE
ADMIN_USER = "devcluster-admin"
ADMIN_GROUPS = ("system:masters", "system:authenticated")

Clock = Callable[[], datetime]


def utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class Identity:
    """Who a token is, as TokenReview's status.user says it."""

    username: str
    uid: str
    groups: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"username": self.username, "uid": self.uid, "groups": list(self.groups)}


@dataclass(frozen=True)
class Issued:
    namespace: str
    name: str
    uid: str  # the ServiceAccount's uid: a recreated ServiceAccount does not inherit tokens
    expires: datetime
    audiences: tuple[str, ...]


def service_account_identity(namespace: str, name: str, uid: str) -> Identity:
    return Identity(
        f"system:serviceaccount:{namespace}:{name}",
        uid,
        ("system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"),
    )


class Tokens:
    """The token table. `lookup_uid(namespace, name)` says the uid of a stored ServiceAccount
    (None when it is gone); `clock` is injectable so tests can let tokens expire."""

    def __init__(self, lookup_uid: Callable[[str, str], str | None], *, clock: Clock = utcnow) -> None:
        self.lookup_uid = lookup_uid
        self.clock = clock
        self.admin_token: str | None = None
        self._issued: dict[str, Issued] = {}
        self._lock = threading.Lock()

    def issue(
        self, namespace: str, name: str, uid: str, *, seconds: int, audiences: Sequence[str]
    ) -> tuple[str, datetime]:
        """A new token for the ServiceAccount and when it expires (JWT-shaped; the signature is
        random, since only this table decides validity)."""
        now = self.clock()
        expires = now + timedelta(seconds=seconds)
        claims = {
            "aud": list(audiences),
            "exp": int(expires.timestamp()),
            "iat": int(now.timestamp()),
            "nbf": int(now.timestamp()),
            "iss": ISSUER,
            "jti": secrets.token_hex(16),
            "sub": f"system:serviceaccount:{namespace}:{name}",
            "kubernetes.io": {"namespace": namespace, "serviceaccount": {"name": name, "uid": uid}},
        }
        token = ".".join(
            _b64(part)
            for part in (
                json.dumps({"alg": "RS256", "kid": "devcluster"}).encode(),
                json.dumps(claims, separators=(",", ":")).encode(),
                secrets.token_bytes(64),
            )
        )
        with self._lock:
            self._forget_expired(now)
            self._issued[_key(token)] = Issued(namespace, name, uid, expires, tuple(audiences))
        return token, expires

    def authenticate(self, token: str, audiences: Sequence[str] = ()) -> tuple[Identity | None, tuple[str, ...], str]:
        """(identity, audiences, error): who `token` is for the wanted `audiences` (the API
        server's own when empty), the audiences it was accepted for, or why not."""
        wanted = tuple(audiences) or (API_AUDIENCE,)
        if self.admin_token is not None and secrets.compare_digest(token.encode(), self.admin_token.encode()):
            # A static token is audience-agnostic: bound implicitly to the API server's audience.
            if API_AUDIENCE not in wanted:
                return None, (), "token audiences is invalid for the target audiences"
            return Identity(ADMIN_USER, "", ADMIN_GROUPS), (API_AUDIENCE,), ""
        with self._lock:
            issued = self._issued.get(_key(token))
        if issued is None:
            return None, (), "invalid bearer token"
        if self.clock() >= issued.expires:
            return None, (), "service account token has expired"
        if self.lookup_uid(issued.namespace, issued.name) != issued.uid:
            return None, (), f'service account "{issued.namespace}/{issued.name}" has been deleted'
        accepted = tuple(a for a in wanted if a in issued.audiences)
        if not accepted:
            return None, (), "token audiences is invalid for the target audiences"
        return service_account_identity(issued.namespace, issued.name, issued.uid), accepted, ""

    def _forget_expired(self, now: datetime) -> None:
        for key in [k for k, v in self._issued.items() if v.expires <= now]:
            del self._issued[key]


def _key(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()
