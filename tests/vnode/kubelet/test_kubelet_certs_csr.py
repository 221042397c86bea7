"""The kubelet serving certificate from the CSR API, end to end: a devcluster run with a kubelet
certificate authority refuses the in-memory certificate (`kubectl logs` errors), the CSR waits
for approval, real `kubectl certificate approve` gets it issued, the listener then serves a
certificate that verifies with the signer's CA and names the node IP (and `kubectl logs`
works), and renewal comes at 70-90% of the lifetime (an injected clock) with the old
certificate served until the new one is issued."""

from __future__ import annotations

import hashlib
import logging
import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from devcluster import DevCluster, csrsigner
from kube.client import Kube
from tests.support.clients.kubectl import run_kubectl
from tests.support.clock import ManualClock
from tests.support.factories import make_pod
from tests.support.polling import wait_for
from tests.support.rigs.vnode import runner_with_pod
from vnode.kubelet import certcsr
from vnode.kubelet.resolve import HandlerRegistry
from vnode.kubelet.server import ListenerConfig, Listeners


@dataclass
class CsrRig:
    cluster: DevCluster
    server: Listeners
    kube: Kube
    kubeconfig: str
    ca: x509.Certificate


@pytest.fixture(scope="module")
def csr_rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CsrRig]:
    from providers.local import LocalProvider

    folder = tmp_path_factory.mktemp("csr")
    signing = csrsigner.make_signing_ca("test-kubelet-serving-ca")
    (folder / "ca.crt").write_bytes(signing.cert_pem)
    (folder / "ca.key").write_bytes(signing.key_pem)
    kubeconfig = str(folder / "kubeconfig")
    registry = HandlerRegistry()
    server = Listeners(registry, kubelet=ListenerConfig("127.0.0.1", 0), node_ip="127.0.0.1")
    server.start()
    provider = LocalProvider("local", {"state_dir": str(folder / "state"), "grace_period": 1})
    with DevCluster(
        kubeconfig_path=kubeconfig,
        scheduler_interval=0.05,
        kubelet_signing_ca=(str(folder / "ca.crt"), str(folder / "ca.key")),
        kubelet_certificate_authority=str(folder / "ca.crt"),
    ) as cluster:
        script = "while true; do echo tick; sleep 0.2; done"
        pod = make_pod("ticker", "local", command=("sh", "-c", script))
        try:
            with runner_with_pod(cluster, provider, registry, server.kubelet_port, pod) as (_, kube):
                yield CsrRig(cluster, server, kube, kubeconfig, x509.load_pem_x509_certificate(signing.cert_pem))
        finally:
            server.stop()


def _kubectl(rig: CsrRig, *args: str) -> subprocess.CompletedProcess[str]:
    return run_kubectl(rig.kubeconfig, *args)


def _served(port: int) -> x509.Certificate:
    context = ssl._create_unverified_context()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der)


def _fingerprint(cert: x509.Certificate) -> str:
    return hashlib.sha256(cert.public_bytes(serialization.Encoding.DER)).hexdigest()


@pytest.mark.parametrize(("jitter", "fraction"), [(0.0, 0.7), (0.5, 0.8), (0.999, 0.8998)])
def test_renewal_comes_at_70_to_90_percent_of_the_lifetime(jitter: float, fraction: float) -> None:
    deadline = certcsr.renewal_deadline(1000.0, 2000.0, jitter=jitter)
    assert deadline == pytest.approx(1000.0 + 1000.0 * fraction, abs=0.1)


def test_the_request_names_the_node_and_its_addresses_with_the_kubelets_usages() -> None:
    request = certcsr.CsrRequest("nebula-local", ("10.0.0.7", "10.0.0.7"), ("nebula.example",), 3600)
    pem = certcsr.request_pem(ec.generate_private_key(ec.SECP256R1()), request)
    csr = x509.load_pem_x509_csr(pem)
    assert csr.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "system:node:nebula-local"
    assert [a.value for a in csr.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)] == ["system:nodes"]
    sans = csr.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["10.0.0.7"]
    assert sans.get_values_for_type(x509.DNSName) == ["nebula.example"]
    body = certcsr.csr_object(pem, request)
    assert body["spec"]["usages"] == ["digital signature", "server auth"]
    assert body["spec"]["signerName"] == "kubernetes.io/kubelet-serving" and body["spec"]["expirationSeconds"] == 3600


def test_csr_issued_certificate_is_served_verified_by_the_api_server_and_renewed_before_expiry(
    csr_rig: CsrRig, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="vnode.kubelet.certcsr")
    refused = _kubectl(csr_rig, "logs", "ticker", "--tail=1")
    assert refused.returncode != 0 and "certificate verify failed" in refused.stderr, refused.stderr
    assert csr_rig.server.kubelet_tls is not None
    clock = ManualClock(time.time())
    manager = certcsr.CsrCertificates(
        csr_rig.kube,
        csr_rig.server.kubelet_tls,
        certcsr.CsrRequest("nebula-local", ("127.0.0.1",), expiration_seconds=600),
        clock=clock,
        jitter=lambda: 0.5,
        check_interval=0.05,
        watch_timeout=2,
        retry=0.5,
    )
    manager.start()
    try:
        first = wait_for(lambda: manager.pending, what="the first CSR")
        assert f"kubectl certificate approve {first}" in caplog.text
        assert "Pending" in _kubectl(csr_rig, "get", "csr", first).stdout
        assert _kubectl(csr_rig, "certificate", "approve", first).returncode == 0
        wait_for(lambda: manager.issued == 1, what="the first certificate served")
        served = _served(csr_rig.server.kubelet_port)
        served.verify_directly_issued_by(csr_rig.ca)
        sans = served.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert "127.0.0.1" in [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)]
        assert served.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "system:node:nebula-local"
        logs = wait_for(lambda: (r := _kubectl(csr_rig, "logs", "ticker", "--tail=1")).returncode == 0 and r, 30)
        assert logs.stdout == "tick\n"
        assert "PRIVATE KEY" not in caplog.text

        lifetime = served.not_valid_after_utc.timestamp() - served.not_valid_before_utc.timestamp()
        clock.now = served.not_valid_before_utc.timestamp() + lifetime * 0.79  # before 80%: no renewal yet
        assert manager.pending is None and manager.issued == 1
        clock.now = served.not_valid_before_utc.timestamp() + lifetime * 0.81
        second = wait_for(lambda: manager.pending, what="the renewal CSR")
        assert second != first
        assert _fingerprint(_served(csr_rig.server.kubelet_port)) == _fingerprint(served)  # old one until issued
        assert _kubectl(csr_rig, "certificate", "approve", second).returncode == 0
        wait_for(lambda: manager.issued == 2, what="the renewed certificate served")
        renewed = _served(csr_rig.server.kubelet_port)
        assert _fingerprint(renewed) != _fingerprint(served)
        renewed.verify_directly_issued_by(csr_rig.ca)
        assert _kubectl(csr_rig, "logs", "ticker", "--tail=1").returncode == 0
    finally:
        manager.stop()
        if manager._thread is not None:
            manager._thread.join(10)  # its watch ends within watch_timeout: none outlives the cluster
