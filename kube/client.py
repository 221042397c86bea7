"""The vnode's one door to the Kubernetes API: JSON in, dicts out, errors translated once.

Built on the official client's ApiClient (kubeconfig, in-cluster auth, TLS, pooling) but
skips its model classes: the controllers work on plain dicts, which is what they compare
and patch. Calls go over the ApiClient's pool's connections (its TLS, client certificate) kept
by `kube.lane`; watches, and everything through a proxy, go to its urllib3 pool manager, past
its REST wrapper. The bearer token is taken from it at most once a second
(`AUTH_REFRESH`), so its refresh hook still rotates tokens. Every urllib3 failure becomes a
`KubeError` subclass here.
Tests: tests/vnode/test_controllers.py, tests/kube/test_reviews.py (close), tests/kube/test_client.py,
tests/kube/test_lane.py.
"""

from __future__ import annotations

import http.client
import json
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any
from urllib.parse import quote, urlencode

import urllib3
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

from kube.lane import Lane

JsonDict = dict[str, Any]

MERGE_PATCH = "application/merge-patch+json"
AUTH_REFRESH = 1.0  # seconds a request's credentials are reused before the ApiClient is asked again


class KubeError(Exception):
    """The API server answered with an error (or, for status 0, could not be reached)."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message


class NotFoundError(KubeError):
    pass


class ConflictError(KubeError):
    """409: a stale resourceVersion, a failed precondition, or AlreadyExists."""


class GoneError(KubeError):
    """410: the resourceVersion is too old; re-list."""


class UnreachableError(KubeError):
    """No answer at all (connection refused, timeout, TLS failure)."""


def _error(status: int, body: bytes) -> KubeError:
    try:
        parsed = json.loads(body)
        reason, message = str(parsed.get("reason", "")), str(parsed.get("message", ""))
    except (ValueError, AttributeError):
        reason, message = "", body[:200].decode("utf-8", "replace")
    kind = {404: NotFoundError, 409: ConflictError, 410: GoneError}.get(status, KubeError)
    return kind(status, reason, message)


USER_AGENT = "nebula-vnode/0.1"


def _read_body(raw: urllib3.BaseHTTPResponse, method: str, path: str) -> bytes:
    """The whole answer body; a connection that breaks mid-body is Unreachable."""
    try:
        return raw.read()
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise UnreachableError(0, "Unreachable", f"{method} {path}: {type(exc).__name__}") from exc


def load_api_client(
    kubeconfig: str | None = None, *, pool_size: int = 32, user_agent: str = USER_AGENT
) -> k8s_client.ApiClient:
    """An ApiClient from `kubeconfig`, else in-cluster config, else $KUBECONFIG/~/.kube/config."""
    configuration = k8s_client.Configuration()
    if kubeconfig:
        k8s_config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    elif os.environ.get("KUBERNETES_SERVICE_HOST"):
        k8s_config.load_incluster_config(client_configuration=configuration)
    else:
        k8s_config.load_kube_config(client_configuration=configuration)
    configuration.connection_pool_maxsize = pool_size
    api = k8s_client.ApiClient(configuration)
    api.user_agent = user_agent
    return api


def path_for(
    resource: str,
    *,
    namespace: str | None = None,
    name: str | None = None,
    subresource: str | None = None,
    group: str = "",
    version: str = "v1",
) -> str:
    """The REST path of a resource (core group when `group` is empty)."""
    parts = ["/api/v1"] if not group else [f"/apis/{group}/{version}"]
    if namespace is not None:
        parts.append(f"namespaces/{quote(namespace, safe='')}")
    parts.append(resource)
    if name is not None:
        parts.append(quote(name, safe=""))
    if subresource:
        parts.append(subresource)
    return "/".join(parts)


class Kube:
    """Thread-safe (the ApiClient's pool is). Watches should use their own Kube object,
    so a long-lived stream never starves the workers' connections."""

    def __init__(self, api_client: k8s_client.ApiClient, *, timeout: float = 30.0) -> None:
        self._api = api_client
        self._timeout = timeout
        self._host = api_client.configuration.host.rstrip("/")
        self._auth_lock = threading.Lock()
        self._auth: dict[str, str] = {}
        self._auth_until = float("-inf")
        self._lane = Lane.of(api_client)

    def fenced(self, check: Callable[[], None]) -> Kube:
        """A client on the same connections that calls `check` before every write (any method
        but GET) and lets what it raises propagate: a replica whose Lease ran out writes nothing."""
        return FencedKube(self._api, check, timeout=self._timeout)

    def close(self) -> None:
        """Close the pooled connections (a later call opens new ones). The ApiClient closes
        nothing when it is collected, so an owner that is done with a client calls this."""
        if self._lane is not None:
            self._lane.close()
        self._api.close()

    def _send(
        self,
        method: str,
        path: str,
        *,
        query: Sequence[tuple[str, str]] = (),
        body: Any = None,
        content_type: str = "application/json",
        timeout: float | tuple[float, float] | None = None,
    ) -> urllib3.BaseHTTPResponse:
        headers = {"Accept": "application/json", "Content-Type": content_type, "User-Agent": self._api.user_agent}
        headers.update(self._auth_headers())
        url = self._host + path + (f"?{urlencode(list(query))}" if query else "")
        wait = timeout or self._timeout
        try:
            # The ApiClient's own pool (TLS, client certificate, proxy), asked directly: its REST
            # wrapper re-ran the credentials' refresh hook and matched content types by regex on
            # every call, a third of a request's CPU in the client (bench/sync.py, issue 37).
            raw: urllib3.BaseHTTPResponse = self._api.rest_client.pool_manager.request(
                method,
                url,
                body=None if body is None else json.dumps(body),
                headers=headers,
                timeout=urllib3.Timeout(connect=wait[0], read=wait[1])
                if isinstance(wait, tuple)
                else urllib3.Timeout(total=wait),
                preload_content=False,
            )
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise UnreachableError(0, "Unreachable", f"{method} {path}: {type(exc).__name__}") from exc
        if raw.status >= 400:
            raise _error(raw.status, _read_body(raw, method, path))
        return raw

    def _auth_headers(self) -> dict[str, str]:
        """The credentials' headers (a bearer token; none with a client certificate alone), asked
        of the ApiClient at most once every AUTH_REFRESH seconds: its refresh hook (a rotated
        token file read again, an exec plugin run when the token expired) runs then, not on
        every request. Tests: tests/kube/test_client.py."""
        now = time.monotonic()
        with self._auth_lock:
            if now >= self._auth_until:
                headers: dict[str, str] = {}
                self._api.update_params_for_auth(headers, [], ["BearerToken"], "", "GET", None)
                self._auth, self._auth_until = headers, now + AUTH_REFRESH
            return self._auth

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Sequence[tuple[str, str]] = (),
        body: Any = None,
        content_type: str = "application/json",
    ) -> JsonDict:
        """One call; the decoded JSON answer. Raises KubeError subclasses."""
        if self._lane is None:  # through a proxy: urllib3's pool manager does it all
            raw = self._send(method, path, query=query, body=body, content_type=content_type)
            data = _read_body(raw, method, path)
        else:
            data = self._ask(method, path, query=query, body=body, content_type=content_type)
        result: JsonDict = json.loads(data) if data else {}
        return result

    def _ask(self, method: str, path: str, *, query: Sequence[tuple[str, str]], body: Any, content_type: str) -> bytes:
        """`request` over the lane's kept connections: the answer's body, or the KubeError."""
        assert self._lane is not None
        headers = {"Accept": "application/json", "Content-Type": content_type, "User-Agent": self._api.user_agent}
        headers.update(self._auth_headers())
        target = path + (f"?{urlencode(list(query))}" if query else "")
        payload = None if body is None else json.dumps(body).encode()
        try:
            status, data = self._lane.send(method, target, payload, headers, self._timeout)
        except (urllib3.exceptions.HTTPError, http.client.HTTPException, OSError) as exc:
            raise UnreachableError(0, "Unreachable", f"{method} {path}: {type(exc).__name__}") from exc
        if status >= 400:
            raise _error(status, data)
        return data

    def get(self, path: str) -> JsonDict:
        return self.request("GET", path)

    def list(self, path: str, **selectors: str) -> tuple[list[JsonDict], str]:
        """(items, list resourceVersion); selectors are query parameters such as
        fieldSelector and labelSelector."""
        answer = self.request("GET", path, query=[(k, v) for k, v in selectors.items() if v])
        return list(answer.get("items") or []), str((answer.get("metadata") or {}).get("resourceVersion", ""))

    def create(self, path: str, obj: Mapping[str, Any]) -> JsonDict:
        return self.request("POST", path, body=dict(obj))

    def replace(self, path: str, obj: Mapping[str, Any]) -> JsonDict:
        return self.request("PUT", path, body=dict(obj))

    def patch(self, path: str, patch: Mapping[str, Any], *, content_type: str = MERGE_PATCH) -> JsonDict:
        return self.request("PATCH", path, body=dict(patch), content_type=content_type)

    def delete(self, path: str, *, grace_seconds: int | None = None, uid: str | None = None) -> JsonDict:
        options: JsonDict = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if grace_seconds is not None:
            options["gracePeriodSeconds"] = grace_seconds
        if uid is not None:
            options["preconditions"] = {"uid": uid}
        return self.request("DELETE", path, body=options)

    def watch(
        self, path: str, *, resource_version: str, timeout_seconds: int = 300, **selectors: str
    ) -> Iterator[tuple[str, JsonDict]]:
        """(type, object) events from `resource_version` until the server ends the stream.
        An ERROR event raises its KubeError (GoneError for 410: re-list)."""
        query = [("watch", "true"), ("allowWatchBookmarks", "true"), ("timeoutSeconds", str(timeout_seconds))]
        query += [("resourceVersion", resource_version)] if resource_version else []
        query += [(k, v) for k, v in selectors.items() if v]
        raw = self._send("GET", path, query=query, timeout=(self._timeout, timeout_seconds + 30))
        try:
            for line in raw:
                if not line.strip():
                    continue
                event = json.loads(line)
                kind, obj = str(event.get("type", "")), event.get("object") or {}
                if kind == "ERROR":
                    raise _error(int(obj.get("code", 500)), json.dumps(obj).encode())
                yield kind, obj
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise UnreachableError(0, "Unreachable", f"watch {path}: {type(exc).__name__}") from exc
        finally:
            # Closed, not only released: a watch left mid-stream (the caller stopped reading,
            # or the server went) would otherwise leave its TLS socket to the collector.
            raw.close()
            raw.release_conn()


class FencedKube(Kube):
    """See `Kube.fenced`. Watches and reads pass; every write asks `check` first."""

    def __init__(self, api_client: k8s_client.ApiClient, check: Callable[[], None], *, timeout: float = 30.0) -> None:
        super().__init__(api_client, timeout=timeout)
        self._check = check

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Sequence[tuple[str, str]] = (),
        body: Any = None,
        content_type: str = "application/json",
    ) -> JsonDict:
        if method != "GET":
            self._check()
        return super().request(method, path, query=query, body=body, content_type=content_type)
