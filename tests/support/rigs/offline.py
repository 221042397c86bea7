"""Handlers with no API server: the one fake of the Kubernetes client (`NoApi`), a Handler
built on it, and Pods provisioned straight at a provider and adopted, as after a restart.

Used by the kubelet and console tests, which read a Handler's view and never its writes:
any call that would reach the API fails the test at once.
"""

from __future__ import annotations

import uuid
from typing import Any

from providers.base import Provider, ProvisionRequest
from providers.claim import claim_name
from providers.podspec import pod_spec_from_dict
from tests.support.factories import make_pod
from tests.support.polling import wait_for
from vnode.handler import Handler


class NoApi:
    """Stands in for the Kubernetes client (and the Event recorder) where a test never reaches
    the API; any call fails."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"unexpected Kubernetes API call {name}")


class KeptEvents:
    """An Event recorder that keeps what it is told, for a Handler with no API server whose
    test does write (deletes write a `Killing` Event)."""

    def __init__(self) -> None:
        self.told: list[tuple[str, str, str, str]] = []  # name, type, reason, message

    def pod(self, pod: Any, event_type: str, reason: str, message: str) -> None:
        self.told.append((str((pod.get("metadata") or {}).get("name")), event_type, reason, message))

    def node(self, node: Any, event_type: str, reason: str, message: str) -> None:
        self.told.append((str((node.get("metadata") or {}).get("name")), event_type, reason, message))


class KeptPatches:
    """Stands in for the Kubernetes client of a Handler whose test writes statuses: keeps each
    PATCH (path, body) in order; any other call fails the test."""

    def __init__(self) -> None:
        self.patches: list[tuple[str, dict[str, Any]]] = []

    def patch(self, path: str, body: dict[str, Any], **_: Any) -> dict[str, Any]:
        self.patches.append((path, body))
        return body

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"unexpected Kubernetes API call {name}")


def offline_handler(provider: Provider, *, events: Any = None, kube: Any = None, **options: Any) -> Handler:
    """A Handler over `provider` whose every API call fails the test (and every Event too,
    unless `events` keeps them, e.g. `KeptEvents()`; and every write, unless `kube` keeps
    them, e.g. `KeptPatches()`)."""
    return Handler(provider, kube=kube or NoApi(), events=events or NoApi(), **options)  # type: ignore[arg-type]


def adopt_new_pod(handler: Handler, name: str, **annotations: str) -> dict[str, Any]:
    """Provision an instance for a new Pod straight at the provider and adopt it, as after a
    restart: the Handler tracks the Pod, no API call."""
    pod = make_pod(name, namespace="default", uid=str(uuid.uuid4()), annotations=annotations, command=("sleep", "300"))
    meta = pod["metadata"]
    request = ProvisionRequest(claim=claim_name(meta["namespace"], name, meta["uid"]))
    result = handler.provider.provision(pod_spec_from_dict(pod), request)
    instance = wait_for(lambda: handler.provider.get(result.instance_id), what=f"the instance of {name}")
    handler.adopt(pod, instance)
    return pod
