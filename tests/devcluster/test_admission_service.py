"""The devcluster calls a webhook that names a `clientConfig.service` as kube-apiserver does: the
Service's port, then a ready address of its Endpoints (or EndpointSlices) under that port's
name, dialled over HTTPS with the certificate checked for `<service>.<namespace>.svc` against
the caBundle. Objects are applied with kubectl 1.37, Pods created with it."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devcluster import DevCluster
from tests.support.clients.kubectl import KUBECTL_137
from tests.support.servers.webhook import Hook, patch_answer, pod, serving

SERVICE_DNS = "console.nebula-system.svc"
REFERENCE = {"namespace": "nebula-system", "name": "console", "path": "/webhooks/pods"}


@pytest.fixture
def service_hook() -> Iterator[Hook]:
    """A webhook whose certificate carries the Service's DNS name, as cert-manager would issue it."""
    with serving(SERVICE_DNS) as server:
        yield server


class Kubectl:
    def __init__(self, cluster: DevCluster, home: Path) -> None:
        if not Path(KUBECTL_137).exists():
            pytest.skip(f"kubectl 1.37 is not installed at {KUBECTL_137}")
        assert cluster.kubeconfig_path
        self.kubeconfig = cluster.kubeconfig_path
        self.env = {"HOME": str(home), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}

    def run(self, *args: str, objects: list[dict[str, Any]] | None = None) -> subprocess.CompletedProcess[str]:
        text = "\n".join(json.dumps(obj) for obj in objects or [])
        return subprocess.run(
            [KUBECTL_137, "--kubeconfig", self.kubeconfig, *args],
            input=text,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    def apply(self, *objects: dict[str, Any]) -> None:
        done = self.run("apply", "-f", "-", objects=list(objects))
        assert done.returncode == 0, done.stderr


@pytest.fixture
def kubectl(cluster: DevCluster, tmp_path: Path) -> Kubectl:
    return Kubectl(cluster, tmp_path)


def service(ports: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "console", "namespace": "nebula-system"},
        "spec": {"selector": {"app": "nebula"}, "ports": ports},
    }


def endpoints(addresses: list[str], ports: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Endpoints",
        "metadata": {"name": "console", "namespace": "nebula-system"},
        "subsets": [{"addresses": [{"ip": ip} for ip in addresses], "ports": ports}],
    }


NAMESPACE = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "nebula-system"}}
HTTPS = {"name": "https", "port": 443, "targetPort": "https"}


def create_pod(kubectl: Kubectl, name: str) -> subprocess.CompletedProcess[str]:
    return kubectl.run("create", "-n", "default", "-f", "-", objects=[pod(name)])


def serve_at_the_service(
    kubectl: Kubectl, hook: Hook, *, port_name: str = "https", reference: dict[str, Any] = REFERENCE
) -> None:
    """The console Service (port `https`), Endpoints at 127.0.0.1 whose port `port_name` is the
    hook's, and the webhook configuration calling the Service by `reference`."""
    kubectl.apply(
        NAMESPACE,
        service([HTTPS]),
        endpoints(["127.0.0.1"], [{"name": port_name, "port": hook.port}]),
        hook.config(service=reference),
    )


def test_a_webhook_by_service_is_called_at_the_endpoint_and_its_patch_applied(
    cluster: DevCluster, kubectl: Kubectl, service_hook: Hook
) -> None:
    """Dialled at the Endpoints address and port; Host, SNI and certificate name the Service."""
    serve_at_the_service(kubectl, service_hook)
    service_hook.answer = patch_answer([{"op": "add", "path": "/metadata/annotations", "value": {"placed": "yes"}}])
    done = create_pod(kubectl, "p")
    assert done.returncode == 0, done.stderr
    stored = cluster.store.get("/pods", "default", "p")
    assert stored is not None and stored["metadata"]["annotations"] == {"placed": "yes"}
    assert service_hook.paths == ["/webhooks/pods?timeout=5s"]
    assert service_hook.hosts == [f"{SERVICE_DNS}:443"]


def test_a_certificate_without_the_service_dns_name_fails_the_call(
    cluster: DevCluster, kubectl: Kubectl, hook: Hook
) -> None:
    """The hook's certificate (localhost, 127.0.0.1) chains to the caBundle but does not name
    console.nebula-system.svc: under failurePolicy Fail the Pod is refused, as on a real cluster."""
    serve_at_the_service(kubectl, hook)
    done = create_pod(kubectl, "refused")
    assert done.returncode != 0
    assert 'Internal error occurred: failed calling webhook "test.hook.io": failed to call webhook: ' in done.stderr
    posted = f'Post "https://{SERVICE_DNS}:443/webhooks/pods?timeout=5s": '
    assert posted + "tls: failed to verify certificate" in done.stderr
    assert SERVICE_DNS in done.stderr.split("tls: failed to verify certificate", 1)[1]
    assert hook.reviews == [] and cluster.store.get("/pods", "default", "refused") is None


@pytest.mark.parametrize("policy", ["Fail", "Ignore"])
def test_a_service_without_endpoints_fails_the_call_and_failure_policy_decides(
    cluster: DevCluster, kubectl: Kubectl, service_hook: Hook, policy: str
) -> None:
    kubectl.apply(NAMESPACE, service([HTTPS]), service_hook.config(service=REFERENCE, failure_policy=policy))
    done = create_pod(kubectl, "p")
    if policy == "Fail":
        assert done.returncode != 0
        assert 'failed calling webhook "test.hook.io"' in done.stderr
        assert 'no endpoints available for service "console"' in done.stderr
        assert cluster.store.get("/pods", "default", "p") is None
    else:
        assert done.returncode == 0, done.stderr
        assert cluster.store.get("/pods", "default", "p") is not None
    assert service_hook.reviews == []


def test_a_named_target_port_is_found_under_the_service_ports_name_among_several(
    cluster: DevCluster, kubectl: Kubectl, service_hook: Hook
) -> None:
    """Service port 8443 (`webhook`, targetPort the named container port `console-https`) is
    served at the Endpoints port named `webhook`, not at the other port of the same subset."""
    ports = [{"name": "metrics", "port": 9090, "targetPort": 9090}, {"name": "webhook", "port": 8443}]
    ports[1]["targetPort"] = "console-https"
    kubectl.apply(
        NAMESPACE,
        service(ports),
        endpoints(["127.0.0.1"], [{"name": "metrics", "port": 1}, {"name": "webhook", "port": service_hook.port}]),
        service_hook.config(service=dict(REFERENCE, port=8443)),
    )
    done = create_pod(kubectl, "p")
    assert done.returncode == 0, done.stderr
    assert len(service_hook.reviews) == 1 and service_hook.hosts == [f"{SERVICE_DNS}:8443"]


def test_endpoints_under_another_port_name_are_no_endpoints(
    cluster: DevCluster, kubectl: Kubectl, service_hook: Hook
) -> None:
    serve_at_the_service(kubectl, service_hook, port_name="console-https")
    done = create_pod(kubectl, "p")
    assert done.returncode != 0 and 'no endpoints available for service "console"' in done.stderr
    assert service_hook.reviews == []


def test_a_ready_endpointslice_address_serves_when_no_endpoints_object_exists(
    cluster: DevCluster, kubectl: Kubectl, service_hook: Hook
) -> None:
    """EndpointSlices labelled kubernetes.io/service-name are read; a not-ready endpoint is skipped."""
    endpoint_slice = {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": "console-abcde",
            "namespace": "nebula-system",
            "labels": {"kubernetes.io/service-name": "console"},
        },
        "addressType": "IPv4",
        "ports": [{"name": "https", "port": service_hook.port, "protocol": "TCP"}],
        "endpoints": [
            {"addresses": ["127.0.0.2"], "conditions": {"ready": False}},
            {"addresses": ["127.0.0.1"], "conditions": {"ready": True}},
        ],
    }
    kubectl.apply(NAMESPACE, service([HTTPS]), endpoint_slice, service_hook.config(service=REFERENCE))
    done = create_pod(kubectl, "p")
    assert done.returncode == 0, done.stderr
    assert len(service_hook.reviews) == 1


@pytest.mark.parametrize(
    ("reference", "message"),
    [
        (dict(REFERENCE, name="missing"), 'service "missing" not found'),
        (dict(REFERENCE, port=8443), 'no service port 8443 found for service "console"'),
    ],
)
def test_a_missing_service_or_service_port_fails_the_call(
    cluster: DevCluster, kubectl: Kubectl, service_hook: Hook, reference: dict[str, Any], message: str
) -> None:
    serve_at_the_service(kubectl, service_hook, reference=reference)
    done = create_pod(kubectl, "p")
    assert done.returncode != 0 and message in done.stderr
    assert service_hook.reviews == []


def test_a_service_gets_the_api_servers_defaults(cluster: DevCluster, kubectl: Kubectl) -> None:
    kubectl.apply(NAMESPACE, service([{"name": "https", "port": 443}]))
    stored = cluster.store.get("/services", "nebula-system", "console")
    assert stored is not None
    assert stored["spec"]["type"] == "ClusterIP" and stored["spec"]["sessionAffinity"] == "None"
    assert stored["spec"]["ports"] == [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 443}]
