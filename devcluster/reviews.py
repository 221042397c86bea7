"""Who is who and who may: TokenRequest (`serviceaccounts/<name>/token`), TokenReview,
SubjectAccessReview and SelfSubjectAccessReview, answered from `tokens` and the stored RBAC
objects through `rbac.authorize`.

`api.py` calls `Reviews.create` for a POST to one of these; the bodies are never stored. The
caller's own bearer token is authenticated here (401 for an unknown one, system:anonymous
without one) and authorized for the create, as the real API server does for these endpoints.
Nothing else in the devcluster checks credentials.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from devcluster import rbac
from devcluster.errors import ApiError, Cause, bad_request, invalid, invalid_value, not_found, required
from devcluster.errors import forbidden as forbidden_field
from devcluster.registry import ResourceType
from devcluster.routing import ResourceRoute
from devcluster.store import Store
from devcluster.tokens import API_AUDIENCE, Identity, Tokens

AUTHENTICATION = "authentication.k8s.io"
AUTHORIZATION = "authorization.k8s.io"
REVIEW_GROUPS = (AUTHENTICATION, AUTHORIZATION)
RBAC_GROUP = "rbac.authorization.k8s.io"
RBAC_KEYS = tuple(f"{RBAC_GROUP}/{p}" for p in ("clusterroles", "roles", "clusterrolebindings", "rolebindings"))
DEFAULT_EXPIRATION = 3600
MIN_EXPIRATION = 600  # the API server refuses shorter TokenRequests
MAX_EXPIRATION = 1 << 32
ANONYMOUS = Identity("system:anonymous", "", (rbac.UNAUTHENTICATED,))

Obj = dict[str, Any]


def unauthorized() -> ApiError:
    return ApiError(401, "Unauthorized", reason="Unauthorized")


def forbidden(identity: Identity, call: rbac.ApiCall, qualified: str) -> ApiError:
    scope = f'in the namespace "{call.namespace}"' if call.namespace else "at the cluster scope"
    resource = call.full_resource
    message = (
        f'{qualified} is forbidden: User "{identity.username}" cannot {call.verb} resource "{resource}" '
        f'in API group "{call.group}" {scope}'
    )
    return ApiError(403, message, reason="Forbidden", kind=call.resource, group=call.group or None)


class Reviews:
    def __init__(self, store: Store, tokens: Tokens) -> None:
        self.store = store
        self.tokens = tokens

    def rbac_objects(self) -> list[Obj]:
        return [obj for key in RBAC_KEYS for obj in self.store.list_objects(key)[0]]

    def caller(self, authorization: str) -> Identity:
        """The identity of a request's `Authorization` header; 401 for an unknown token."""
        if not authorization:
            return ANONYMOUS
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise unauthorized()
        identity, _, _ = self.tokens.authenticate(token.strip())
        if identity is None:
            raise unauthorized()
        return identity

    def allows(self, identity: Identity, call: rbac.ApiCall) -> tuple[bool, str]:
        return rbac.authorize(self.rbac_objects(), user=identity.username, groups=identity.groups, call=call)

    def create(self, route: ResourceRoute, body: Any, authorization: str) -> Obj:
        """Answer a POST to serviceaccounts/<name>/token or to a review resource."""
        identity = self.caller(authorization)
        rt = route.rt
        call = rbac.ApiCall("create", rt.group, rt.plural, route.subresource, route.namespace or "", route.name)
        if not self.allows(identity, call)[0]:
            raise forbidden(identity, call, f"{rt.plural}.{rt.group}" if rt.group else rt.plural)
        if not isinstance(body, Mapping):
            raise bad_request(f"the body of the request must be a {rt.kind} object")
        if route.subresource == "token":
            return self.token_request(route.namespace or "", route.name, body)
        if rt.plural == "tokenreviews":
            return self.token_review(body)
        if rt.plural == "subjectaccessreviews":
            return self.access_review(body, None)
        if rt.plural == "selfsubjectaccessreviews":
            return self.access_review(body, identity)
        raise ApiError(405, f"the server does not allow this method on the requested resource ({rt.plural})")

    def token_request(self, namespace: str, name: str, body: Mapping[str, Any]) -> Obj:
        account = self.store.get("/serviceaccounts", namespace, name)
        if account is None:
            raise not_found("serviceaccounts", name)
        spec = dict(body.get("spec") or {})
        seconds = spec.get("expirationSeconds") or DEFAULT_EXPIRATION
        if not isinstance(seconds, int) or isinstance(seconds, bool):
            raise _token_invalid(name, invalid_value("spec.expirationSeconds", None, "must be an integer"))
        if seconds < MIN_EXPIRATION:
            detail = "may not specify a duration less than 10 minutes"
            raise _token_invalid(name, invalid_value("spec.expirationSeconds", seconds, detail))
        if seconds > MAX_EXPIRATION:
            detail = "may not specify a duration larger than 2^32 seconds"
            raise _token_invalid(name, invalid_value("spec.expirationSeconds", seconds, detail))
        if spec.get("boundObjectRef"):
            raise _token_invalid(name, forbidden_field("spec.boundObjectRef", "not supported here"))
        audiences = strings(spec, "audiences", "TokenRequest", name) or [API_AUDIENCE]
        token, expires = self.tokens.issue(
            namespace, name, str(account["metadata"].get("uid", "")), seconds=seconds, audiences=audiences
        )
        return {
            "kind": "TokenRequest",
            "apiVersion": f"{AUTHENTICATION}/v1",
            "metadata": {"name": name, "namespace": namespace, "creationTimestamp": None},
            "spec": {"audiences": audiences, "expirationSeconds": seconds, "boundObjectRef": None},
            "status": {"token": token, "expirationTimestamp": expires.strftime("%Y-%m-%dT%H:%M:%SZ")},
        }

    def token_review(self, body: Mapping[str, Any]) -> Obj:
        spec = dict(body.get("spec") or {})
        token = spec.get("token")
        if not isinstance(token, str) or not token:
            raise invalid("TokenReview", "", [required("spec.token")], group=AUTHENTICATION)
        audiences = strings(spec, "audiences", "TokenReview", "")
        identity, accepted, error = self.tokens.authenticate(token, audiences)
        status: Obj = {"authenticated": identity is not None, "user": {}}
        if identity is not None:
            status["user"] = identity.to_json()
            status["audiences"] = list(accepted)
        else:
            status["error"] = f"[{error}]"
        # The token is not echoed back, as the API server does not echo it either.
        answer_spec = {k: v for k, v in spec.items() if k != "token"}
        return _answer("TokenReview", AUTHENTICATION, answer_spec, status)

    def access_review(self, body: Mapping[str, Any], identity: Identity | None) -> Obj:
        """A SubjectAccessReview (for `spec.user`/`groups`) or, with `identity`, a
        SelfSubjectAccessReview (for the caller)."""
        kind = "SubjectAccessReview" if identity is None else "SelfSubjectAccessReview"
        spec = copy.deepcopy(dict(body.get("spec") or {}))
        resource, non_resource = spec.get("resourceAttributes"), spec.get("nonResourceAttributes")
        if not isinstance(resource or {}, Mapping) or not isinstance(non_resource or {}, Mapping):
            raise bad_request("spec.resourceAttributes and spec.nonResourceAttributes must be objects")
        if bool(resource) == bool(non_resource):
            detail = "exactly one of nonResourceAttributes or resourceAttributes required"
            raise invalid(kind, "", [invalid_value("spec", None, detail)], group=AUTHORIZATION)
        if identity is None:
            user, groups = str(spec.get("user") or ""), tuple(strings(spec, "groups", kind, ""))
            if not user and not groups:
                detail = "at least one of user or group must be specified"
                raise invalid(kind, "", [invalid_value("spec.user", "", detail)], group=AUTHORIZATION)
        else:
            user, groups = identity.username, identity.groups
        if resource:
            attrs = dict(resource)
            call = rbac.ApiCall(
                str(attrs.get("verb") or ""),
                str(attrs.get("group") or ""),
                str(attrs.get("resource") or ""),
                str(attrs.get("subresource") or ""),
                str(attrs.get("namespace") or ""),
                str(attrs.get("name") or ""),
            )
        else:
            attrs = dict(non_resource or {})
            call = rbac.ApiCall(str(attrs.get("verb") or ""), path=str(attrs.get("path") or ""))
        decision, reason = rbac.authorize(self.rbac_objects(), user=user, groups=groups, call=call)
        status: Obj = {"allowed": decision}
        if reason:
            status["reason"] = reason
        return _answer(kind, AUTHORIZATION, spec, status)


def strings(spec: Mapping[str, Any], key: str, kind: str, name: str) -> list[str]:
    """`spec[key]` as a list of strings (absent: empty); 422 for anything else."""
    value = spec.get(key) or []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        group = AUTHENTICATION if kind.startswith("Token") else AUTHORIZATION
        raise invalid(kind, name, [invalid_value(f"spec.{key}", None, "must be a list of strings")], group=group)
    return list(value)


def _token_invalid(name: str, cause: Cause) -> ApiError:
    return invalid("TokenRequest", name, [cause], group=AUTHENTICATION)


def _answer(kind: str, group: str, spec: Obj, status: Obj) -> Obj:
    return {
        "kind": kind,
        "apiVersion": f"{group}/v1",
        "metadata": {"creationTimestamp": None},
        "spec": spec,
        "status": status,
    }


def serves(rt: ResourceType, subresource: str) -> bool:
    """Whether a POST to this route is answered here rather than stored."""
    return (subresource == "token" and rt.plural == "serviceaccounts" and not rt.group) or rt.group in REVIEW_GROUPS
