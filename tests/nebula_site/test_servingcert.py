"""`runvnode`'s kubelet serving certificate flags: which source they choose over the NEBULA
settings, the combinations refused before anything starts, and a mismatched pair of files
refused at start-up with the file named."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from nebula_site import servingcert
from tests.support.kubeconfigs import unserved_kubeconfig
from vnode.kubelet import certs

NONE: dict[str, Any] = {"KUBELET_CERT_SOURCE": "memory", "KUBELET_CERT": "", "KUBELET_KEY": ""}


@pytest.mark.parametrize(
    ("options", "nebula", "expected"),
    [
        ({}, NONE, ("memory", None)),
        ({"kubelet_cert": "c", "kubelet_key": "k"}, NONE, ("files", ("c", "k"))),
        ({}, {**NONE, "KUBELET_CERT": "c", "KUBELET_KEY": "k"}, ("files", ("c", "k"))),
        ({"kubelet_cert_source": "csr"}, NONE, ("csr", None)),
        ({}, {**NONE, "KUBELET_CERT_SOURCE": "csr"}, ("csr", None)),
        ({"kubelet_cert_source": "memory"}, {**NONE, "KUBELET_CERT_SOURCE": "csr"}, ("memory", None)),
    ],
)
def test_the_flags_over_the_settings_choose_the_source(
    options: dict[str, Any], nebula: dict[str, Any], expected: tuple[str, tuple[str, str] | None]
) -> None:
    assert servingcert.choose(options, nebula, "10.0.0.1") == expected


@pytest.mark.parametrize(
    ("options", "nebula", "address", "words"),
    [
        ({"kubelet_cert": "c"}, NONE, "10.0.0.1", "go together"),
        ({"kubelet_cert_source": "files"}, NONE, "10.0.0.1", "needs --kubelet-cert and --kubelet-key"),
        ({"kubelet_cert_source": "csr", "kubelet_cert": "c", "kubelet_key": "k"}, NONE, "10.0.0.1", "not 'csr'"),
        ({"kubelet_cert_source": "csr"}, NONE, None, "needs --node-ip or --node-dns-name"),
        ({}, {**NONE, "KUBELET_CERT_SOURCE": "vault"}, "10.0.0.1", "must be one of memory, files, csr"),
    ],
)
def test_a_bad_combination_is_a_command_error(
    options: dict[str, Any], nebula: dict[str, Any], address: str | None, words: str
) -> None:
    with pytest.raises(CommandError, match=words):
        servingcert.choose(options, nebula, address)


def test_runvnode_refuses_a_mismatched_pair_at_start_up(tmp_path: Path) -> None:
    ca = certs.make_ca("test-ca")
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert.write_bytes(certs.issue(ca, "one", hosts=("127.0.0.1",)).cert_pem)
    key.write_bytes(certs.issue(ca, "two", hosts=("127.0.0.1",)).key_pem)
    with pytest.raises(CommandError, match="is not the private key of the certificate in"):
        call_command("runvnode", "--kubelet-addr", "127.0.0.1:0", "--console-addr", "127.0.0.1:0",
                     "--kubelet-cert", str(cert), "--kubelet-key", str(key),
                     "--provider", "fake", "--kubeconfig", unserved_kubeconfig(tmp_path))  # fmt: skip
