"""I4 in the virtual kubelet: resolved env values and connect credentials never appear in
log records, Events, Pod annotations or error strings; the credential lands only in the
Pod's connect Secret."""

from __future__ import annotations

import base64
import logging
from typing import Any

import pytest

from kube import names
from kube.client import Kube, path_for
from kube.events import EventRecorder
from kube.worker import Retry
from providers.fake import FakeProvider
from tests.support.factories import make_pod
from tests.support.pods import get_pod
from vnode.handler import Handler

VALUE = "s3cr3t-env-value-9f2c"


def secret_env(key: str = "token") -> list[dict[str, Any]]:
    return [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": key}}}]


def handler_for(kube: Kube, cloud_name: str) -> tuple[Handler, FakeProvider]:
    provider = FakeProvider("gpu", {"cloud": cloud_name})
    return Handler(provider, kube=kube, events=EventRecorder(kube, component="test")), provider


def secret_and_handler(
    kube: Kube, cloud_name: str, caplog: pytest.LogCaptureFixture, *, key: str
) -> tuple[Handler, FakeProvider]:
    """The Secret `creds` holding VALUE under `key`, every log record captured, and a Handler."""
    caplog.set_level(logging.DEBUG)
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds"}, "stringData": {key: VALUE}}
    kube.create(path_for("secrets", namespace="default"), secret)
    return handler_for(kube, cloud_name)


def everything_written(kube: Kube, name: str, caplog: pytest.LogCaptureFixture) -> str:
    """The log records, the Pod's Events and the Pod's metadata, as one text."""
    events, _ = kube.list(path_for("events", namespace="default"), fieldSelector=f"involvedObject.name={name}")
    pod = get_pod(kube, name) or {}
    return "\n".join(
        [
            caplog.text,
            *(f"{e['reason']} {e['message']}" for e in events),
            repr(pod.get("metadata")),
            repr(pod.get("status")),
        ]
    )


def test_I4_env_values_and_credentials_reach_only_the_provider_and_connect_secret(
    kube: Kube, cloud_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    handler, provider = secret_and_handler(kube, cloud_name, caplog, key="token")
    pod = kube.create(path_for("pods", namespace="default"), make_pod("keeper", "gpu", container={"env": secret_env()}))
    handler.provisioner.create_pod(pod)
    handler.flush("default/keeper", pod)
    connect = kube.get(path_for("secrets", namespace="default", name=names.connect_secret_name("keeper")))
    credential = base64.b64decode(connect["data"]["token"]).decode()
    written = everything_written(kube, "keeper", caplog)
    assert VALUE not in written and credential not in written
    assert VALUE not in repr(handler.tracked("default/keeper"))
    assert provider.list(), "the Pod was provisioned"


def test_I4_an_unresolvable_env_names_the_key_and_object_never_a_value(
    kube: Kube, cloud_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    handler, provider = secret_and_handler(kube, cloud_name, caplog, key="other")
    pod = kube.create(
        path_for("pods", namespace="default"), make_pod("lacking", "gpu", container={"env": secret_env()})
    )
    with pytest.raises(Retry) as raised:
        handler.provisioner.create_pod(pod)
    assert "creds" in str(raised.value) and "'token'" in str(raised.value)
    assert VALUE not in str(raised.value) and VALUE not in repr(raised.value)
    assert VALUE not in everything_written(kube, "lacking", caplog)
    assert provider.list() == []


def test_I4_a_provider_outage_during_provision_leaks_no_env_value(
    kube: Kube, cloud_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    handler, provider = secret_and_handler(kube, cloud_name, caplog, key="token")
    provider.cloud.outage()
    pod = kube.create(path_for("pods", namespace="default"), make_pod("outage", "gpu", container={"env": secret_env()}))
    with pytest.raises(Retry) as raised:
        handler.provisioner.create_pod(pod)
    assert VALUE not in str(raised.value)
    assert VALUE not in everything_written(kube, "outage", caplog)
