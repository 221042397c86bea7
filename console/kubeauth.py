"""Logins by Kubernetes identity: who a bearer token is (TokenReview) and what cluster RBAC lets
it do on the `nebula.io` console resources (SubjectAccessReview), through the process's
`kube.reviews.Reviewer`.

`nebula_site.manager.main.lead` installs the Reviewer (`install`/`uninstall`); the REST API
authenticates `Authorization: Bearer <token>` with `BearerTokenAuthentication` and authorizes
with `allows`; the admin login (`console.kubelogin`) uses the same. The token is never stored,
logged or echoed; a review that cannot be made is `ReviewFailed` (503), never a "no".
Tests: tests/console/test_kube_logins.py.
"""

# mypy: disallow-subclassing-any=False

from __future__ import annotations

import logging
import threading
from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions, status

from kube.client import KubeError
from kube.reviews import Access, KubeUser, Reviewer

logger = logging.getLogger(__name__)

GROUP = "nebula.io"
# The console's resources in RBAC (none is stored anywhere: they name what a person may see).
API_RESOURCES = ("pods", "claims", "nodes", "pools", "blocklist")
CONSOLE = "console"  # the admin pages and the dashboard
CLEAR_VERB = "clear"  # on `blocklist`, with the entry id as the name
VIEW_CONSOLE = Access("get", group=GROUP, resource=CONSOLE)
SESSION_KEY = "nebula.kube_user"  # name, uid, groups of a token login; never the token

_lock = threading.Lock()
_reviewer: Reviewer | None = None


def install(reviewer: Reviewer) -> None:
    """Accept Kubernetes tokens, reviewed through `reviewer` (the process's own Kube client)."""
    global _reviewer
    with _lock:
        _reviewer = reviewer


def uninstall() -> None:
    global _reviewer
    with _lock:
        _reviewer = None


def installed() -> Reviewer | None:
    with _lock:
        return _reviewer


class ReviewFailed(Exception):
    """The API server could not be asked (unreachable, or it refused the manager the review)."""


def read_access(resource: str, name: str = "") -> Access:
    return Access("get", group=GROUP, resource=resource, name=name)


def clear_access(entry_id: str) -> Access:
    return Access(CLEAR_VERB, group=GROUP, resource="blocklist", name=entry_id)


def review(token: str) -> KubeUser | None:
    """Who `token` is (None: the cluster does not accept it). ReviewFailed when it cannot be
    asked, or when this process accepts no Kubernetes tokens."""
    reviewer = installed()
    if reviewer is None:
        raise ReviewFailed("this process does not accept Kubernetes tokens (no Reviewer installed)")
    try:
        return reviewer.user(token)
    except KubeError as err:
        logger.warning("TokenReview failed: %s %s", err.status, err.reason or "unreachable")
        raise ReviewFailed(
            f"the Kubernetes API server could not review the token ({err.status} {err.reason})"
        ) from None


def allows(user: KubeUser, access: Access) -> bool:
    """SubjectAccessReview (cached by the Reviewer's TTL); ReviewFailed when it cannot be asked."""
    reviewer = installed()
    if reviewer is None:
        raise ReviewFailed("this process does not accept Kubernetes tokens (no Reviewer installed)")
    try:
        return reviewer.allows(user, access)
    except KubeError as err:
        logger.warning("SubjectAccessReview for %s failed: %s %s", user.name, err.status, err.reason or "unreachable")
        raise ReviewFailed(
            f"the Kubernetes API server could not authorize the request ({err.status} {err.reason})"
        ) from None


def denial(user: KubeUser, access: Access) -> str:
    """The API server's words for a refusal, naming the missing permission."""
    named = f' named "{access.name}"' if access.name else ""
    return f'User "{user.name}" cannot {access.verb} resource "{access.resource}"{named} in API group "{access.group}"'


def session_user(request: Any) -> KubeUser | None:
    """The Kubernetes identity of a token login's session (the shadow user's), else None."""
    session = getattr(request, "session", None)
    user = getattr(request, "user", None)
    data = session.get(SESSION_KEY) if session is not None else None
    if not isinstance(data, dict) or user is None or not user.is_authenticated:
        return None
    if data.get("shadow") != user.get_username():
        return None
    return KubeUser(name=str(data["name"]), uid=str(data.get("uid", "")), groups=tuple(data.get("groups") or ()))


def remember(session: Any, user: KubeUser, shadow: str) -> None:
    session[SESSION_KEY] = {"name": user.name, "uid": user.uid, "groups": list(user.groups), "shadow": shadow}


class Principal:
    """`request.user` of a REST request authenticated by a Kubernetes token: not a Django
    user, no staff rights; what it may do is asked of RBAC."""

    is_authenticated = True
    is_anonymous = False
    is_active = True
    is_staff = False
    is_superuser = False
    pk = None
    id = None

    def __init__(self, kube_user: KubeUser) -> None:
        self.kube_user = kube_user

    def get_username(self) -> str:
        return self.kube_user.name

    def __str__(self) -> str:
        return self.kube_user.name


def kube_user_of(request: Any) -> KubeUser | None:
    """The Kubernetes identity behind a request (a bearer token or a token login's session)."""
    principal = getattr(request, "user", None)
    if isinstance(principal, Principal):
        return principal.kube_user
    return session_user(request)


class ReviewUnavailable(exceptions.APIException):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = "The Kubernetes API server could not review the credentials; try again."
    default_code = "review_unavailable"


class BearerTokenAuthentication(authentication.BaseAuthentication):
    """`Authorization: Bearer <token>` from `kubectl create token ...`, reviewed by the cluster.
    (DRF's TokenAuthentication keeps `Authorization: Token <key>` for Django users.)"""

    keyword = "Bearer"

    def authenticate(self, request: Any) -> tuple[Principal, None] | None:
        parts = authentication.get_authorization_header(request).split()
        if not parts or parts[0].lower() != self.keyword.lower().encode():
            return None
        if len(parts) != 2:
            raise exceptions.AuthenticationFailed("Invalid bearer header: expected `Bearer <token>`.")
        try:
            token = parts[1].decode("ascii")
        except UnicodeError:
            raise exceptions.AuthenticationFailed("Invalid bearer header: the token is not ASCII.") from None
        try:
            user = review(token)
        except ReviewFailed as err:
            raise ReviewUnavailable(f"{err}; try again.") from None
        if user is None:
            raise exceptions.AuthenticationFailed("The cluster does not accept this token (invalid or expired).")
        return Principal(user), None

    def authenticate_header(self, request: Any) -> str:
        return self.keyword


class BearerTokenScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]
    """The OpenAPI security scheme of `BearerTokenAuthentication` (drf-spectacular finds it by
    `target_class` once this module is imported, which the authenticator's import does)."""

    target_class = "console.kubeauth.BearerTokenAuthentication"
    name = "kubernetesToken"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A Kubernetes token (kubectl create token ...); cluster RBAC on nebula.io decides.",
        }
