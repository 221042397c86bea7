"""The Pod's imagePullSecrets, resolved as a kubelet resolves them (`vnode.sources.pullsecrets`), and
through the vnode: a provider that takes them gets the registry's credentials in
`ProvisionRequest.registry_auth`, a missing Secret is the kubelet's Warning and not a stop,
and a provider that pulls without them says so. No password reaches an Event or a log (I4)."""

from __future__ import annotations

import base64
import dataclasses
import json
import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from kube import names
from kube.client import Kube, path_for
from providers.base import Capabilities, PodSpec, ProvisionRequest, ProvisionResult
from providers.fake import FakeProvider
from providers.pullauth import RegistryAuth
from tests.support.factories import make_pod
from tests.support.pods import phase_of
from tests.support.polling import wait_for
from vnode.runner import Runner
from vnode.sources.env import PodFields
from vnode.sources.pullsecrets import resolve_pull_auth

PASSWORD = "pull-pw-7c1e"  # must reach the provider's request and nothing else


def docker_config(auths: Mapping[str, Any]) -> bytes:
    return json.dumps({"auths": dict(auths)}).encode()


def basic(user: str, password: str) -> str:
    return base64.b64encode(f"{user}:{password}".encode()).decode()


def pod_with(*secret_names: str) -> dict[str, Any]:
    return {"metadata": {"namespace": "ml"}, "spec": {"imagePullSecrets": [{"name": n} for n in secret_names]}}


def reader(secrets: Mapping[str, Mapping[str, bytes]]) -> Callable[[str, str], Mapping[str, bytes] | None]:
    def read(namespace: str, name: str) -> Mapping[str, bytes] | None:
        assert namespace == "ml"
        return secrets.get(name)

    return read


def test_dockerconfigjson_and_dockercfg_secrets_give_each_registry_its_credentials() -> None:
    secrets = {
        "ghcr": {".dockerconfigjson": docker_config({"https://ghcr.io/v2/": {"auth": basic("bot", PASSWORD)}})},
        "hub": {
            ".dockerconfigjson": docker_config({"https://index.docker.io/v1/": {"username": "me", "password": "p"}})
        },
        "old": {".dockercfg": json.dumps({"registry.example.com": {"auth": basic("legacy", "x")}}).encode()},
    }
    pull = resolve_pull_auth(PodFields.of(pod_with("ghcr", "hub", "old")), reader(secrets))
    assert pull.auths == {
        "ghcr.io": RegistryAuth("bot", PASSWORD),
        "docker.io": RegistryAuth("me", "p"),
        "registry.example.com": RegistryAuth("legacy", "x"),
    }
    assert pull.missing == [] and pull.warning() is None
    assert PASSWORD not in repr(pull)


def test_the_first_secret_naming_a_registry_wins() -> None:
    secrets = {
        "a": {".dockerconfigjson": docker_config({"ghcr.io": {"auth": basic("first", "1")}})},
        "b": {".dockerconfigjson": docker_config({"ghcr.io": {"auth": basic("second", "2")}})},
    }
    assert resolve_pull_auth(PodFields.of(pod_with("a", "b")), reader(secrets)).auths == {
        "ghcr.io": RegistryAuth("first", "1")
    }


@pytest.mark.parametrize(
    "data",
    [None, {"token": b"x"}, {".dockerconfigjson": b"not json"}, {".dockerconfigjson": b"[1]"},
     {".dockerconfigjson": docker_config({"ghcr.io": {"auth": "%%%"}})}],
)  # fmt: skip
def test_a_missing_or_unreadable_secret_is_named_and_the_rest_still_count(data: Mapping[str, bytes] | None) -> None:
    good = {".dockerconfigjson": docker_config({"quay.io": {"auth": basic("u", "p")}})}
    secrets: dict[str, Mapping[str, bytes]] = {"good": good}
    if data is not None:
        secrets["bad"] = data
    pull = resolve_pull_auth(PodFields.of(pod_with("bad", "good")), reader(secrets))
    assert pull.auths == {"quay.io": RegistryAuth("u", "p")} and pull.missing == ["bad"]
    assert pull.warning() == (
        "Unable to retrieve some image pull secrets (bad); attempting to pull the image may not succeed."
    )


# -- through the vnode ------------------------------------------------------------------------
class PullingFake(FakeProvider):
    """The fake provider, declaring it takes imagePullSecrets (as modal does) or not, keeping
    every ProvisionRequest it was given."""

    def __init__(self, *args: Any, uses: bool, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.uses = uses
        self.requests: list[ProvisionRequest] = []
        self._lock = threading.Lock()

    def capabilities(self) -> Capabilities:
        return dataclasses.replace(super().capabilities(), uses_pull_secrets=self.uses)

    def provision(self, pod: PodSpec, request: ProvisionRequest) -> ProvisionResult:
        with self._lock:
            self.requests.append(request)
        return super().provision(pod, request)


def events_for(kube: Kube, name: str, reason: str) -> list[dict[str, Any]]:
    items, _ = kube.list(path_for("events", namespace="default"), fieldSelector=f"involvedObject.name={name}")
    return [e for e in items if e["reason"] == reason]


def create_secret(kube: Kube, name: str, registry: str) -> None:
    data = {".dockerconfigjson": base64.b64encode(docker_config({registry: {"auth": basic("bot", PASSWORD)}})).decode()}
    secret = {"metadata": {"name": name}, "type": "kubernetes.io/dockerconfigjson", "data": data}
    kube.create(path_for("secrets", namespace="default"), secret)


def test_I4_a_providers_request_carries_the_pull_credentials_and_a_missing_secret_is_the_kubelets_warning(
    kube: Kube, start_runner: Callable[..., Runner], cloud_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    provider = PullingFake("gpu", {"cloud": cloud_name}, uses=True)
    start_runner(provider)
    create_secret(kube, "ghcr-pull", "ghcr.io")
    pod = make_pod("private", "gpu", imagePullSecrets=[{"name": "absent"}, {"name": "ghcr-pull"}],
                   container={"image": "ghcr.io/acme/trainer:1"})  # fmt: skip
    kube.create(path_for("pods", namespace="default"), pod)
    wait_for(lambda: phase_of(kube, "private") == "Running", timeout=15)
    (request,) = provider.requests
    assert request.registry_auth == {"ghcr.io": RegistryAuth("bot", PASSWORD)}
    (warning,) = wait_for(lambda: events_for(kube, "private", names.EVENT_PULL_SECRET_UNREAD))
    assert warning["type"] == "Warning" and "(absent)" in warning["message"]
    events, _ = kube.list(path_for("events", namespace="default"))
    assert PASSWORD not in repr(events) + caplog.text + repr(request)


def test_a_provider_that_pulls_without_the_pods_credentials_says_so(
    kube: Kube, start_runner: Callable[..., Runner], cloud_name: str
) -> None:
    provider = PullingFake("gpu", {"cloud": cloud_name}, uses=False)
    start_runner(provider)
    create_secret(kube, "hub-pull", "https://index.docker.io/v1/")
    kube.create(
        path_for("pods", namespace="default"), make_pod("unused", "gpu", imagePullSecrets=[{"name": "hub-pull"}])
    )
    wait_for(lambda: phase_of(kube, "unused") == "Running", timeout=15)
    assert provider.requests[0].registry_auth == {}
    (warning,) = wait_for(lambda: events_for(kube, "unused", names.EVENT_PULL_SECRETS_NOT_USED))
    assert warning["message"] == "gpu pulls images without the Pod's imagePullSecrets; a private image may fail to pull"
