"""Handlers with no API server: the one fake of the Kubernetes client (`NoApi`), a Handler
built on it, and Pods provisioned straight at a provider and adopted, as after a restart.

Used by the kubelet and console tests, which read a Handler's view and never its writes:
any call that would reach the API fails the test at once.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

from providers.base import Instance, InstanceState, Provider, ProvisionRequest
from providers.claim import claim_name
from providers.fake import FakeProvider
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


def kept_fake_handler(prefix: str, scenario: dict[str, Any] | None = None) -> tuple[Handler, KeptPatches, KeptEvents]:
    """A Handler over a fresh fake cloud (named `prefix-<random>`, with `scenario` if given) that
    keeps its writes and its Events, for a test that reads them."""
    options: dict[str, Any] = {"cloud": f"{prefix}-{uuid.uuid4().hex}"}
    if scenario is not None:
        options["scenario"] = scenario
    writes, events = KeptPatches(), KeptEvents()
    return offline_handler(FakeProvider("fake", options), events=events, kube=writes), writes, events


def serving_fake(registry: Any, prefix: str, scenario: dict[str, Any]) -> Iterator[Handler]:
    """A fake cloud (`prefix-<random>`, `scenario`) behind an offline Handler on `registry`
    (a kubelet listener's), for a module fixture to `yield from`; its instances ended after."""
    provider = FakeProvider("fake", {"cloud": f"{prefix}-{uuid.uuid4().hex}", "scenario": scenario})
    handler = offline_handler(provider)
    registry.add(handler)
    yield handler
    registry.remove(handler)
    for instance in provider.list():
        provider.terminate(instance.id)


def adopt_provisioned(handler: Handler, pod: dict[str, Any], *, running: bool = False) -> str:
    """Provision `pod`'s instance straight at the provider and adopt it, as after a restart (once
    the instance runs, when `running`): the Handler tracks the Pod, no API call. Its key."""
    meta = pod["metadata"]
    request = ProvisionRequest(claim=claim_name(meta["namespace"], meta["name"], meta["uid"]))
    result = handler.provider.provision(pod_spec_from_dict(pod), request)

    def seen() -> Instance | None:
        instance = handler.provider.get(result.instance_id)
        return instance if instance is not None and (not running or instance.state is InstanceState.RUNNING) else None

    instance = wait_for(seen, what=f"the instance of {meta['name']}" + (" running" if running else ""))
    handler.adopt(pod, instance)
    return f"{meta['namespace']}/{meta['name']}"


def adopt_new_pod(handler: Handler, name: str, **annotations: str) -> dict[str, Any]:
    """A new Pod whose instance is provisioned straight at the provider and adopted
    (`adopt_provisioned`)."""
    pod = make_pod(name, namespace="default", uid=str(uuid.uuid4()), annotations=annotations, command=("sleep", "300"))
    adopt_provisioned(handler, pod)
    return pod
