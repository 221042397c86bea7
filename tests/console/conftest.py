"""Fixtures for the console: Handlers over the fake provider with no API server (adopted Pods),
the console's observer installed, and the process runtime pointed at those Handlers."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from console import observer as console_observer
from console import runtime
from placement.blocklist import Blocklist
from providers.base import Provider, ProvisionRequest
from providers.claim import claim_name
from providers.fake import FakeProvider
from providers.podspec import pod_spec_from_dict
from vnode.handler import Handler


class NoApi:
    """Stands in for the Kubernetes client where a test never reaches the API; any call fails."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"unexpected Kubernetes API call {name}")


def offline_handler(provider: Provider, **options: Any) -> Handler:
    return Handler(provider, kube=NoApi(), events=NoApi(), **options)  # type: ignore[arg-type]


def make_pod(name: str, *, namespace: str = "default", **annotations: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": str(uuid.uuid4()), "annotations": annotations},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]},
    }


def adopt_new_pod(handler: Handler, name: str, **annotations: str) -> dict[str, Any]:
    """Provision at the fake and adopt, as after a restart: the Handler tracks the Pod, no API call."""
    pod = make_pod(name, **annotations)
    meta = pod["metadata"]
    result = handler.provider.provision(
        pod_spec_from_dict(pod), ProvisionRequest(claim=claim_name(meta["namespace"], name, meta["uid"]))
    )
    instance = handler.provider.get(result.instance_id)
    assert instance is not None
    handler.adopt(pod, instance)
    return pod


@pytest.fixture
def fake_provider() -> Callable[..., FakeProvider]:
    def build(name: str, **scenario: Any) -> FakeProvider:
        options: dict[str, Any] = {"cloud": f"console-{uuid.uuid4().hex[:8]}"}
        if scenario:
            options["scenario"] = scenario
        return FakeProvider(name, options)

    return build


@pytest.fixture
def observer() -> Iterator[console_observer.ConsoleObserver]:
    installed = console_observer.install()
    yield installed
    console_observer.uninstall()


@pytest.fixture
def installed_runtime() -> Iterator[Callable[..., runtime.Runtime]]:
    """Publish Handlers and a Blocklist as runvnode would; cleared afterwards."""

    def install(*, handlers: list[Handler], blocklist: Blocklist | None = None) -> runtime.Runtime:
        runtime.install(handlers=handlers, blocklist=blocklist)
        return runtime.current()

    yield install
    runtime.clear()
