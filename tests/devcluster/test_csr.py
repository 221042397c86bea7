"""certificates.k8s.io/v1 CertificateSigningRequests on the devcluster over real HTTP: the
API server's validation (a bad request is a 422 and stores nothing), the `/approval` and
`/status` rules, real `kubectl certificate approve` and `deny`, and the kubelet-serving
signer (issues for approved requests, honours expirationSeconds, fails invalid ones)."""

from __future__ import annotations

import base64
import datetime
import ipaddress
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from devcluster import DevCluster
from kube.client import Kube, KubeError, path_for
from tests.support.clients.kubectl import KUBECTL_120, KUBECTL_137, KUBECTL_IMAGE, run_kubectl
from tests.support.polling import wait_for

CSRS = path_for("certificatesigningrequests", group="certificates.k8s.io")
SERVING = ["digital signature", "server auth"]


def _request(
    cn: str = "system:node:nebula-local", org: str | None = "system:nodes", ip: str | None = "10.1.2.3"
) -> str:
    key = ec.generate_private_key(ec.SECP256R1())
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attributes.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    builder = x509.CertificateSigningRequestBuilder().subject_name(x509.Name(attributes))
    if ip:
        sans = x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(ip))])
        builder = builder.add_extension(sans, critical=False)
    pem = builder.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)
    return base64.b64encode(pem).decode()


def _csr(name: str, **spec: Any) -> dict[str, Any]:
    body = {"request": _request(), "signerName": "kubernetes.io/kubelet-serving", "usages": SERVING, **spec}
    return {
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"name": name},
        "spec": {k: v for k, v in body.items() if v is not None},
    }


def _kubectl(cluster: DevCluster, binary: str, *args: str) -> subprocess.CompletedProcess[str]:
    assert cluster.kubeconfig_path is not None
    return run_kubectl(cluster.kubeconfig_path, *args, binary=binary)


def _issued(kube: Kube, name: str) -> x509.Certificate:
    def certificate() -> str | None:
        value = (kube.get(f"{CSRS}/{name}").get("status") or {}).get("certificate")
        return str(value) if value else None

    pem = base64.b64decode(wait_for(certificate, what=f"{name}'s certificate"))
    return x509.load_pem_x509_certificate(pem)


@pytest.mark.parametrize("binary", [KUBECTL_137, KUBECTL_IMAGE, KUBECTL_120])
def test_kubectl_certificate_approve_gets_a_kubelet_serving_certificate_signed(
    cluster: DevCluster, kube: Kube, binary: str
) -> None:
    if not Path(binary).exists():
        pytest.skip(f"{binary} is not installed (make tools)")
    created = kube.create(CSRS, _csr("node-csr", expirationSeconds=600))
    assert created["spec"]["username"] and "status" not in created
    listing = _kubectl(cluster, binary, "get", "csr")
    assert listing.returncode == 0 and "node-csr" in listing.stdout and "Pending" in listing.stdout, listing
    approved = _kubectl(cluster, binary, "certificate", "approve", "node-csr")
    assert approved.returncode == 0, approved.stderr
    cert = _issued(kube, "node-csr")
    ca = x509.load_pem_x509_certificate(cluster.kubelet_serving_ca_pem)
    cert.verify_directly_issued_by(ca)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["10.1.2.3"]
    lifetime = cert.not_valid_after_utc - datetime.datetime.now(datetime.UTC)
    assert datetime.timedelta(seconds=500) < lifetime <= datetime.timedelta(seconds=600)
    conditions = kube.get(f"{CSRS}/node-csr")["status"]["conditions"]
    assert [(c["type"], c["status"], c["reason"]) for c in conditions] == [("Approved", "True", "KubectlApprove")]
    assert "Approved,Issued" in _kubectl(cluster, binary, "get", "csr", "node-csr").stdout


def test_kubectl_certificate_deny_leaves_it_unsigned_and_approval_is_then_refused(
    cluster: DevCluster, kube: Kube
) -> None:
    kube.create(CSRS, _csr("denied"))
    assert _kubectl(cluster, KUBECTL_137, "certificate", "deny", "denied").returncode == 0
    csr = kube.get(f"{CSRS}/denied")
    assert [c["type"] for c in csr["status"]["conditions"]] == ["Denied"]
    both = {**csr, "status": {"conditions": [*csr["status"]["conditions"], {"type": "Approved", "status": "True"}]}}
    with pytest.raises(KubeError, match="mutually exclusive") as err:
        kube.replace(f"{CSRS}/denied/approval", both)
    assert err.value.status == 422
    with pytest.raises(KubeError, match='may not remove a condition of type "Denied"'):
        kube.replace(f"{CSRS}/denied/approval", {**csr, "status": {}})
    assert "certificate" not in kube.get(f"{CSRS}/denied")["status"]


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ({"signerName": None}, "spec.signerName: Required value"),
        ({"signerName": "kubelet-serving"}, "must be a fully qualified domain and path"),
        ({"usages": []}, "spec.usages: Required value"),
        ({"usages": ["server auth", "flying"]}, 'spec.usages[1]: Unsupported value: "flying"'),
        ({"usages": ["server auth", "server auth"]}, 'spec.usages[1]: Duplicate value: "server auth"'),
        ({"expirationSeconds": 599}, "may not specify a duration less than 600 seconds"),
        ({"request": base64.b64encode(b"not a pem").decode()}, "PEM block type must be CERTIFICATE REQUEST"),
        ({"request": "%%%"}, "illegal base64 data"),
    ],
)
def test_an_invalid_csr_is_refused_and_nothing_is_stored(kube: Kube, spec: dict[str, Any], words: str) -> None:
    with pytest.raises(KubeError, match=re.escape(words)) as err:
        kube.create(CSRS, _csr("bad", **spec))
    assert err.value.status in (400, 422)
    assert kube.list(CSRS)[0] == []


@pytest.mark.parametrize(
    ("request_b64", "usages", "words"),
    [
        (_request(cn="nebula-local"), SERVING, "subject common name does not begin with system:node:"),
        (_request(org=None), SERVING, "subject organization is not system:nodes"),
        (_request(ip=None), SERVING, "DNS or IP subjectAltName is required"),
        (_request(), ["digital signature", "client auth"], "usages did not match"),
    ],
)
def test_the_kubelet_serving_signer_fails_what_the_real_one_refuses(
    kube: Kube, request_b64: str, usages: list[str], words: str
) -> None:
    csr = kube.create(CSRS, _csr("odd", request=request_b64, usages=usages))
    approval = {"type": "Approved", "status": "True", "reason": "Test", "message": "approved by the test"}
    kube.replace(f"{CSRS}/odd/approval", {**csr, "status": {"conditions": [approval]}})

    def failed() -> dict[str, Any] | None:
        conditions = (kube.get(f"{CSRS}/odd").get("status") or {}).get("conditions") or []
        return next((c for c in conditions if c["type"] == "Failed"), None)

    condition = wait_for(failed, what="the Failed condition")
    assert condition["reason"] == "SignerValidationFailure" and words in condition["message"]
    assert "certificate" not in kube.get(f"{CSRS}/odd")["status"]


def test_status_may_not_carry_a_certificate_before_approval_nor_change_the_spec(kube: Kube) -> None:
    csr = kube.create(CSRS, _csr("early"))
    fake = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----\n").decode()
    with pytest.raises(KubeError, match="certificate may only be set on an approved request"):
        kube.replace(f"{CSRS}/early/status", {**csr, "status": {"certificate": fake}})
    changed = {**csr, "spec": {**csr["spec"], "signerName": "example.com/other"}, "metadata": csr["metadata"]}
    kept = kube.replace(f"{CSRS}/early", changed)
    assert kept["spec"]["signerName"] == "kubernetes.io/kubelet-serving"


def test_other_signers_requests_stay_pending_after_approval(kube: Kube) -> None:
    approval = {"type": "Approved", "status": "True", "reason": "Test", "message": "approved by the test"}
    for name, signer in (("elsewhere", "example.com/custom"), ("serving", "kubernetes.io/kubelet-serving")):
        csr = kube.create(CSRS, _csr(name, signerName=signer))
        approved = kube.replace(f"{CSRS}/{name}/approval", {**csr, "status": {"conditions": [approval]}})
        assert approved["status"]["conditions"][0]["lastUpdateTime"]
    _issued(kube, "serving")  # the signer has passed over both approved requests
    assert "certificate" not in kube.get(f"{CSRS}/elsewhere")["status"]
