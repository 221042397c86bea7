"""Who may use the kubelet API, decided as a kubelet decides it, before anything else runs.

Called by the request hook (`upgrade.KubeletRequest.process`) for every request on the
kubelet listener: plain routes, SPDY and websocket upgrades alike, before any answer or 101.
Authentication: a client certificate verified against the client CA (user = CN, groups = O),
else a bearer token reviewed with TokenReview, else `system:anonymous` when configured, else
401. Authorisation: a SubjectAccessReview on the kubelet's mapping (verb from the method,
`nodes/<subresource>` named by the node), or AlwaysAllow. Reviews block, so they run on the
gate's own threads, never on the reactor; answers are cached (kubelet defaults: tokens 2 min,
allowed 5 min, denied 30 s). A token is kept only as its SHA-256 and never logged.
Tests: tests/vnode/kubelet/test_kubelet_auth.py, tests/vnode/kubelet/test_kubelet_auth_runvnode.py.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from cryptography import x509
from cryptography.x509.oid import NameOID

from kube.client import Kube, KubeError
from kube.reviews import Access, KubeUser, allowed, review_token
from vnode.kubelet import certs, loop
from vnode.kubelet.resolve import HandlerRegistry

logger = logging.getLogger(__name__)

WEBHOOK = "Webhook"
ALWAYS_ALLOW = "AlwaysAllow"
AUTHORIZATION_MODES = (WEBHOOK, ALWAYS_ALLOW)
AUTHENTICATED = "system:authenticated"
ANONYMOUS = KubeUser("system:anonymous", groups=("system:unauthenticated",))
TOKEN_TTL = 120.0  # the kubelet's authentication.webhook.cacheTTL
ALLOWED_TTL = 300.0  # authorization.webhook.cacheAuthorizedTTL
DENIED_TTL = 30.0  # authorization.webhook.cacheUnauthorizedTTL
MAX_CACHED = 4096  # I7: entries per cache; a full cache starts afresh
REVIEW_WORKERS = 4
MAX_WAITING = 1024  # I7: requests waiting for a review thread; past it 503, nothing queued
_VERBS = {"GET": "get", "HEAD": "get", "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
_SUBRESOURCES = {"stats": "stats", "metrics": "metrics", "logs": "log", "spec": "spec"}
_POD_ROUTES = frozenset({"containerLogs", "exec", "attach", "portForward"})
_ACTIONS = frozenset({"exec", "attach", "portForward"})


@dataclass(frozen=True)
class KubeletAuth:
    """How the kubelet listener authenticates and authorises (the kubelet's `authentication`
    and `authorization` configuration). `kube` answers TokenReview and SubjectAccessReview; it
    may be None only with token auth off and AlwaysAllow. Raises ValueError when inconsistent."""

    anonymous: bool = False
    authorization: str = WEBHOOK
    token_auth: bool = True
    kube: Kube | None = field(default=None, compare=False, repr=False)
    token_ttl: float = TOKEN_TTL
    allowed_ttl: float = ALLOWED_TTL
    denied_ttl: float = DENIED_TTL

    def __post_init__(self) -> None:
        if self.authorization not in AUTHORIZATION_MODES:
            modes = " or ".join(AUTHORIZATION_MODES)
            raise ValueError(f"kubelet authorization mode {self.authorization!r}: expected {modes}")
        if self.kube is None and (self.token_auth or self.authorization == WEBHOOK):
            raise ValueError("token authentication and Webhook authorization need an API server client")

    @property
    def open(self) -> bool:
        """True when anyone who reaches the port gets in (anonymous and AlwaysAllow)."""
        return self.anonymous and self.authorization == ALWAYS_ALLOW


# Every client gets in as system:anonymous. For tests and benches that are not about auth;
# the process wiring always passes the configured KubeletAuth (runvnode refuses anonymous).
OPEN = KubeletAuth(anonymous=True, authorization=ALWAYS_ALLOW, token_auth=False)


@dataclass(frozen=True, repr=False)
class Credentials:
    """What one request presents. `certificate` was presented at the TLS handshake;
    `certificate_error` is empty when the client CA verified it. repr never shows the token."""

    certificate: x509.Certificate | None = None
    certificate_error: str = ""
    token: str | None = None

    def __repr__(self) -> str:
        subject = self.certificate.subject.rfc4514_string() if self.certificate is not None else None
        return f"Credentials(certificate={subject!r}, token={'<set>' if self.token else None})"


@dataclass(frozen=True)
class Decision:
    """The gate's answer: `code` 200 lets the request through; else 401, 403, 500 or 503 with `message`."""

    code: int
    message: str = ""
    user: KubeUser | None = None

    @property
    def allowed(self) -> bool:
        return self.code == 200


def bearer_token(header: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header; None for any other header."""
    parts = (header or "").strip().split(None, 1)
    if len(parts) != 2 or parts[0].lower() != "bearer" or not parts[1].strip():
        return None
    return parts[1].strip()


def certificate_user(certificate: x509.Certificate) -> KubeUser | None:
    """The user a verified client certificate names: CN the name, each O a group."""
    names = certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    name = str(names[0].value) if names else ""
    if not name:
        return None
    groups = [str(o.value) for o in certificate.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
    return KubeUser(name, groups=tuple(dict.fromkeys([*groups, AUTHENTICATED])))


def _segments(raw_path: str) -> list[str]:
    return [unquote(s) for s in raw_path.split("?", 1)[0].split("/")[1:]]


def verb_for(method: str) -> str:
    """The API verb of an HTTP method, as the kubelet maps it."""
    return _VERBS.get(method.upper(), method.lower())


def subresource_for(raw_path: str) -> str:
    """`stats`, `metrics`, `log` or `spec` for paths under those, `proxy` for everything else
    (segments decoded as the router decodes them, so both read the same first segment)."""
    segments = _segments(raw_path)
    return _SUBRESOURCES.get(segments[0] if segments else "", "proxy")


def pod_of(raw_path: str) -> tuple[str, str] | None:
    """(namespace, pod) of a Pod route (containerLogs, exec, attach, portForward)."""
    segments = _segments(raw_path)
    if len(segments) >= 3 and segments[0] in _POD_ROUTES and segments[1] and segments[2]:
        return segments[1], segments[2]
    return None


def accesses(method: str, raw_path: str, nodes: Sequence[str]) -> list[Access]:
    """What a request asks, once per node it touches (an empty name: every node).

    Stricter than the kubelet in one place: exec, attach and portForward are `create` whatever
    the method. A kubelet maps a websocket exec (a GET) to `get`, so `nodes/proxy` get, which
    monitoring tools often hold, would run commands; here it takes `create`, as SPDY's POST does.
    """
    segments = _segments(raw_path)
    action = bool(segments) and segments[0] in _ACTIONS
    verb, subresource = "create" if action else verb_for(method), subresource_for(raw_path)
    return [Access(verb, resource="nodes", subresource=subresource, name=node) for node in nodes]


def forbidden_message(user: KubeUser, access: Access, *, error: bool = False) -> str:
    """The kubelet's words for a refusal (403) or a failed review (500)."""
    what = "Authorization error" if error else "Forbidden"
    return f"{what} (user={user.name}, verb={access.verb}, resource=nodes, subresource(s)=[{access.subresource}])"


class _Cache:
    """Answers by key, each with its own time to live; thread-safe, at most MAX_CACHED entries."""

    def __init__(self, monotonic: Callable[[], float]) -> None:
        self._entries: dict[Any, tuple[float, Any]] = {}
        self._lock = threading.Lock()
        self._monotonic = monotonic

    def get(self, key: Any) -> tuple[bool, Any]:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or self._monotonic() >= entry[0]:
                return False, None
            return True, entry[1]

    def put(self, key: Any, value: Any, ttl: float) -> None:
        with self._lock:
            if len(self._entries) >= MAX_CACHED:
                self._entries.clear()
            self._entries[key] = (self._monotonic() + ttl, value)


class Gate:
    """Decides each kubelet request (`decide`, blocking; `submit`, on the gate's threads).
    Built by `Listeners` from its `KubeletAuth` and the registry of the nodes it serves.

    Node-wide routes (/pods, /runningpods, /stats, /metrics, /healthz) answer for every
    served node, so they need the access on every one; a Pod route needs it on the node
    serving the Pod (on every node when none does, before the route's 404).
    """

    def __init__(
        self, config: KubeletAuth, registry: HandlerRegistry, *, monotonic: Callable[[], float] = time.monotonic
    ) -> None:
        self.config = config
        self._registry = registry
        self._tokens = _Cache(monotonic)
        self._decisions = _Cache(monotonic)
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()
        self.waiting = 0  # requests submitted and not yet decided (I7: at most MAX_WAITING)
        self.refused = 0

    def submit(self, credentials: Credentials, method: str, raw_path: str) -> Future[Decision]:
        """Decide on a review thread; at once a 503 when MAX_WAITING requests already wait."""
        with self._pool_lock:
            if self.waiting >= MAX_WAITING:
                self.refused += 1
                busy: Future[Decision] = Future()
                busy.set_result(
                    Decision(503, f"{MAX_WAITING} kubelet requests are waiting for authorization; try again")
                )
                return busy
            if self._pool is None:
                self._pool = ThreadPoolExecutor(REVIEW_WORKERS, thread_name_prefix="kubelet-auth")
            self.waiting += 1
            future = self._pool.submit(self.decide, credentials, method, raw_path)
        future.add_done_callback(self._decided)
        return future

    def _decided(self, _future: Future[Decision]) -> None:
        with self._pool_lock:
            self.waiting -= 1

    def close(self) -> None:
        """Stop the review threads and close the API client's pooled connections (a client
        shared with others reconnects when next used)."""
        with self._pool_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
        if self.config.kube is not None:
            self.config.kube.close()

    def decide(self, credentials: Credentials, method: str, raw_path: str) -> Decision:
        user = self.authenticate(credentials)
        if user is None:
            return Decision(401, "Unauthorized")
        if self.config.authorization == ALWAYS_ALLOW:
            return Decision(200, user=user)
        for access in accesses(method, raw_path, self.nodes_for(raw_path)):
            try:
                if not self._allows(user, access):
                    logger.info("kubelet request forbidden: %s", forbidden_message(user, access))
                    return Decision(403, forbidden_message(user, access), user)
            except KubeError as exc:
                logger.warning("kubelet SubjectAccessReview failed for %s: %s", user.name, exc)
                return Decision(500, forbidden_message(user, access, error=True), user)
        return Decision(200, user=user)

    def authenticate(self, credentials: Credentials) -> KubeUser | None:
        """The request's user: its certificate's, its token's, anonymous, or None (401).
        A credential that fails is a 401 even with anonymous on, as on a kubelet."""
        if credentials.certificate is not None:
            if credentials.certificate_error:
                logger.info("kubelet request refused: client certificate: %s", credentials.certificate_error)
                return None
            return certificate_user(credentials.certificate)
        if credentials.token is not None and self.config.token_auth:
            return self._token_user(credentials.token)
        return ANONYMOUS if self.config.anonymous else None

    def nodes_for(self, raw_path: str) -> list[str]:
        handlers = self._registry.handlers()
        pod = pod_of(raw_path)
        if pod is not None:
            for handler in handlers:
                if handler.tracks(*pod):
                    return [handler.node_name]
        return sorted(h.node_name for h in handlers) or [""]

    def _token_user(self, token: str) -> KubeUser | None:
        key = hashlib.sha256(token.encode()).hexdigest()
        known, cached = self._tokens.get(key)
        if known:
            return cached if isinstance(cached, KubeUser) else None
        assert self.config.kube is not None
        try:
            user = review_token(self.config.kube, token)
        except KubeError as exc:  # not cached: the next request asks again
            logger.warning("kubelet TokenReview failed (%d %s); answering 401", exc.status, exc.reason)
            return None
        if user is not None and AUTHENTICATED not in user.groups and user.name != ANONYMOUS.name:
            user = KubeUser(user.name, user.uid, (*user.groups, AUTHENTICATED), user.extra)
        self._tokens.put(key, user, self.config.token_ttl)
        return user

    def _allows(self, user: KubeUser, access: Access) -> bool:
        known, decision = self._decisions.get((user, access))
        if known:
            return bool(decision)
        assert self.config.kube is not None
        decision = allowed(self.config.kube, user, access)
        self._decisions.put((user, access), decision, self.config.allowed_ttl if decision else self.config.denied_ttl)
        return bool(decision)


# -- the reactor side: the request hook calls `admit` -------------------------------------------
def credentials_of(request: Any) -> Credentials:
    """On the reactor: the certificate the TLS handshake received (and whether the client CA
    verified it) and the bearer token of a Twisted request."""
    certificate, error = None, ""
    handle = getattr(getattr(request.channel, "transport", None), "getHandle", lambda: None)()
    if handle is not None and hasattr(handle, "get_peer_certificate"):
        certificate = handle.get_peer_certificate(as_cryptography=True)
        result = getattr(handle, certs.VERIFY_ERROR, 0) if certificate is not None else 0
        error = f"not verified by the client CA (OpenSSL verify error {result})" if result else ""
    header = request.getHeader(b"authorization")
    return Credentials(certificate, error, bearer_token(header.decode("latin-1") if header else None))


def admit(request: Any, gate: Gate, proceed: Callable[[], Any]) -> None:
    """On the reactor: decide `request` off the reactor, then call `proceed` (on the reactor)
    if it is allowed, or answer 401/403/500 as the kubelet words them. Nothing else of the
    request (route, upgrade, body) is looked at before."""
    method, path = request.method.decode("latin-1"), request.path.decode("latin-1")
    future = gate.submit(credentials_of(request), method, path)

    def decided(done: Future[Decision]) -> None:
        loop.reactor.callFromThread(_finish, request, done, proceed)

    future.add_done_callback(decided)


def _finish(request: Any, done: Future[Decision], proceed: Callable[[], Any]) -> None:
    if request.channel is None or getattr(request, "_disconnected", False) or done.cancelled():
        return  # the client went while we asked
    try:
        decision = done.result()
    except Exception:
        logger.exception("kubelet request authorisation failed")
        decision = Decision(500, "Internal Server Error")
    if decision.allowed:
        request.nebula_user, request.nebula_admitted = decision.user, True
        proceed()
        return
    body = decision.message.encode()
    request.setResponseCode(decision.code)
    request.setHeader(b"content-type", b"text/plain; charset=utf-8")
    request.setHeader(b"content-length", str(len(body)).encode())
    if decision.code == 503:
        request.setHeader(b"retry-after", b"1")
    if request.requestHeaders.hasHeader(b"upgrade"):
        request.setHeader(b"connection", b"close")  # an upgrade that did not happen ends the connection
        request.channel.persistent = False
    request.write(body)
    request.finish()
