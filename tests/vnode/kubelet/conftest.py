"""Fixtures for the kubelet API: a Listeners on ephemeral loopback ports, Handlers over
the fake provider (no cluster needed), and an end-to-end rig shared by a module: the
embedded API server, an in-process Runner on the local provider, the server, one Pod."""

from __future__ import annotations

import http.client
import os
import ssl
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from devcluster import DevCluster
from kube.client import Kube, load_api_client, path_for
from kube.events import EventRecorder
from providers.base import PodSpec, Provider, ProvisionRequest
from providers.claim import claim_name
from providers.fake import FakeProvider
from tests.polling import wait_for as wait_for  # re-exported for the tests here
from vnode.handler import Handler
from vnode.kubelet.resolve import HandlerRegistry
from vnode.kubelet.server import ListenerConfig, Listeners
from vnode.runner import Runner

ROOT = Path(__file__).resolve().parents[3]
KUBECTL_137 = str(ROOT / ".venv" / "bin" / "kubectl")
KUBECTL_IMAGE = "/usr/bin/kubectl"
KUBECTL_120 = str(ROOT / ".tools" / "kubectl-1.20" / "usr" / "bin" / "kubectl")


def kubelet_connection(port: int, *, context: ssl.SSLContext | None = None) -> http.client.HTTPSConnection:
    """A keep-alive HTTPS connection to a local listener (its certificate is not verified
    unless `context` says so)."""
    context = context or ssl._create_unverified_context()
    return http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=30)


def https_get(port: int, path: str, *, context: ssl.SSLContext | None = None) -> tuple[int, dict[str, str], bytes]:
    """One GET over TLS (the server's certificate is not verified unless `context` says so)."""
    connection = kubelet_connection(port, context=context)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def pod_dict(namespace: str, name: str, uid: str, **container: Any) -> dict[str, Any]:
    main = {"name": "main", "image": "busybox", "command": ["sleep", "300"], **container}
    return {"metadata": {"namespace": namespace, "name": name, "uid": uid}, "spec": {"containers": [main]}}


def offline_handler(provider: Provider) -> Handler:
    """A Handler whose writes would fail: tests adopt instances into it (no API call)."""
    kube = Kube(k8s.ApiClient(k8s.Configuration()))
    return Handler(provider, kube=kube, events=EventRecorder(kube, component="test"))


def adopt_new(handler: Handler, name: str, **container: Any) -> dict[str, Any]:
    """Provision an instance for a new Pod straight at the provider and track it."""
    uid = str(uuid.uuid4())
    pod = pod_dict("default", name, uid, **container)
    spec = PodSpec("default", name, uid, "main", "busybox", command=tuple(pod["spec"]["containers"][0]["command"]))
    result = handler.provider.provision(spec, ProvisionRequest(claim=claim_name("default", name, uid)))
    instance = wait_for(lambda: handler.provider.get(result.instance_id))
    handler.adopt(pod, instance)
    return pod


@pytest.fixture(scope="module")
def registry() -> HandlerRegistry:
    return HandlerRegistry()


@pytest.fixture(scope="module")
def server(registry: HandlerRegistry) -> Iterator[Listeners]:
    from nebula_site.asgi import application

    running = Listeners(
        registry,
        kubelet=ListenerConfig("127.0.0.1", 0),
        node_ip="127.0.0.1",
        console=ListenerConfig("127.0.0.1", 0),
        console_app=application,
    )
    running.start()
    yield running
    running.stop()


@pytest.fixture(scope="module")
def fake_handler(registry: HandlerRegistry) -> Iterator[Handler]:
    scenario = {
        "log": {"interval": 0.05},
        "exec": {"commands": {"both": {"stdout": "to-stdout\n", "stderr": "to-stderr\n", "exit_code": 3}}},
    }
    provider = FakeProvider("fake", {"cloud": f"kubelet-{uuid.uuid4().hex}", "scenario": scenario})
    handler = offline_handler(provider)
    registry.add(handler)
    yield handler
    registry.remove(handler)
    for instance in provider.list():
        provider.terminate(instance.id)


@dataclass
class Rig:
    """The end-to-end setup: kubectl -> devcluster proxy -> Listeners -> local provider."""

    cluster: DevCluster
    server: Listeners
    runner: Runner
    kubeconfig: str
    pod: str

    def kubectl(
        self, binary: str, *args: str, input: bytes | None = None, timeout: float = 60, websockets: bool = True
    ) -> subprocess.CompletedProcess[bytes]:
        env = dict(os.environ, KUBECONFIG=self.kubeconfig, HOME=str(Path(self.kubeconfig).parent))
        if not websockets:
            env["KUBECTL_REMOTE_COMMAND_WEBSOCKETS"] = "false"
        return subprocess.run(
            [binary, "--kubeconfig", self.kubeconfig, *args], input=input, capture_output=True, timeout=timeout, env=env
        )


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory, registry: HandlerRegistry, server: Listeners) -> Iterator[Rig]:
    from providers.local import LocalProvider

    folder = tmp_path_factory.mktemp("rig")
    kubeconfig = str(folder / "kubeconfig")
    provider = LocalProvider("local", {"state_dir": str(folder / "state"), "grace_period": 1})
    with DevCluster(kubeconfig_path=kubeconfig, scheduler_interval=0.05) as cluster:
        runner = Runner(
            provider,
            kube=Kube(load_api_client(kubeconfig)),
            watch_kube=Kube(load_api_client(kubeconfig)),
            node_ip="127.0.0.1",
            kubelet_port=server.kubelet_port,
            poll_interval=0.2,
            lease_renew_interval=0.5,
            workers=4,
        )
        runner.start()
        registry.add(runner.handler)
        kube = Kube(load_api_client(kubeconfig))
        script = "i=0; while true; do i=$((i+1)); echo line $i; sleep 0.2; done"
        kube.create(path_for("pods", namespace="default"), rig_pod("talker", script))
        wait_for(lambda: _phase(kube, "talker") == "Running", 60)
        logs = "/containerLogs/default/talker/main"
        wait_for(lambda: https_get(server.kubelet_port, logs)[2].count(b"\n") >= 15, 60, 0.2)  # 3 s of backlog
        try:
            yield Rig(cluster, server, runner, kubeconfig, "talker")
        finally:
            registry.remove(runner.handler)
            runner.stop(timeout=10)
            for instance in provider.list():
                provider.terminate(instance.id)


def rig_pod(name: str, script: str, **container: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeSelector": {"nebula.io/provider": "local"},
            "tolerations": [{"key": "nebula.io/provider", "operator": "Exists"}],
            "containers": [{"name": "main", "image": "busybox", "command": ["sh", "-c", script], **container}],
        },
    }


def _phase(kube: Kube, name: str) -> str | None:
    pod = kube.get(path_for("pods", namespace="default", name=name))
    return (pod.get("status") or {}).get("phase")
