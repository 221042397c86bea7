"""Who a bearer token is and what it may do, asked of the API server: TokenReview
(authentication.k8s.io/v1) and SubjectAccessReview (authorization.k8s.io/v1).

Used by the console (API and admin logins by Kubernetes identity) and the metrics listener's
optional token auth, so cluster RBAC decides who sees and who acts. `Reviewer` caches each
answer for `ttl` seconds (a token's review by its SHA-256, never the token itself), as the
kube-apiserver's webhook authenticator does, so a page of requests costs one review.
The token is sent only in the TokenReview's body and never logged.
Tests: tests/kube/test_reviews.py.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kube.client import Kube

TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
DEFAULT_TTL = 10.0
MAX_CACHED = 4096


@dataclass(frozen=True)
class KubeUser:
    """An authenticated Kubernetes identity, as TokenReview's status.user names it."""

    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()


@dataclass(frozen=True)
class Access:
    """What is asked: a resource verb (`group`/`resource`/`name`/`namespace`) or, with
    `path`, a non-resource URL such as `/metrics`."""

    verb: str
    group: str = ""
    resource: str = ""
    name: str = ""
    namespace: str = ""
    subresource: str = ""
    path: str = ""

    def spec(self) -> dict[str, Any]:
        if self.path:
            return {"nonResourceAttributes": {"path": self.path, "verb": self.verb}}
        attributes = {
            "verb": self.verb,
            "group": self.group,
            "resource": self.resource,
            "name": self.name,
            "namespace": self.namespace,
            "subresource": self.subresource,
        }
        return {"resourceAttributes": {k: v for k, v in attributes.items() if v or k in ("verb", "group")}}


def user_from(status: Mapping[str, Any]) -> KubeUser | None:
    """The KubeUser of a TokenReview status, None unless it says authenticated."""
    user = status.get("user") or {}
    if status.get("authenticated") is not True or not isinstance(user, Mapping) or not user.get("username"):
        return None
    extra = user.get("extra") or {}
    return KubeUser(
        name=str(user["username"]),
        uid=str(user.get("uid") or ""),
        groups=tuple(str(g) for g in user.get("groups") or ()),
        extra=tuple(sorted((str(k), tuple(str(v) for v in vs or ())) for k, vs in dict(extra).items())),
    )


def review_token(kube: Kube, token: str, *, audiences: Sequence[str] = ()) -> KubeUser | None:
    """TokenReview: who `token` is, None if the API server does not authenticate it.
    Raises KubeError when the review itself fails (unreachable, forbidden)."""
    spec: dict[str, Any] = {"token": token}
    if audiences:
        spec["audiences"] = list(audiences)
    answer = kube.create(TOKEN_REVIEWS, {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec})
    return user_from(answer.get("status") or {})


def allowed(kube: Kube, user: KubeUser, access: Access) -> bool:
    """SubjectAccessReview: whether RBAC (or whatever authorizes the cluster) lets `user` do
    `access`. Raises KubeError when the review itself fails."""
    spec = access.spec() | {"user": user.name, "groups": list(user.groups)}
    if user.uid:
        spec["uid"] = user.uid
    if user.extra:
        spec["extra"] = {k: list(v) for k, v in user.extra}
    answer = kube.create(
        ACCESS_REVIEWS, {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}
    )
    return (answer.get("status") or {}).get("allowed") is True


@dataclass
class Reviewer:
    """`review_token` and `allowed` with a small TTL cache (both answers, yes and no)."""

    kube: Kube
    ttl: float = DEFAULT_TTL
    audiences: tuple[str, ...] = ()
    monotonic: Callable[[], float] = time.monotonic
    _users: dict[str, tuple[float, KubeUser | None]] = field(default_factory=dict)
    _decisions: dict[tuple[KubeUser, Access], tuple[float, bool]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def user(self, token: str) -> KubeUser | None:
        key = hashlib.sha256(token.encode()).hexdigest()
        cached = self._cached(self._users, key)
        if cached is not None:
            known: KubeUser | None = cached[1]
            return known
        user = review_token(self.kube, token, audiences=self.audiences)
        self._store(self._users, key, user)
        return user

    def allows(self, user: KubeUser, access: Access) -> bool:
        cached = self._cached(self._decisions, (user, access))
        if cached is not None:
            return bool(cached[1])
        decision = allowed(self.kube, user, access)
        self._store(self._decisions, (user, access), decision)
        return decision

    def _cached(self, table: dict[Any, tuple[float, Any]], key: Any) -> tuple[float, Any] | None:
        with self._lock:
            entry = table.get(key)
            if entry is None or self.monotonic() - entry[0] >= self.ttl:
                return None
            return entry

    def _store(self, table: dict[Any, tuple[float, Any]], key: Any, value: Any) -> None:
        with self._lock:
            if len(table) >= MAX_CACHED:
                table.clear()
            table[key] = (self.monotonic(), value)
