"""Which serving certificate the kubelet listener uses: `runvnode`'s flags over the NEBULA
settings, checked once, before anything starts (bad combinations are a CommandError).

Called by `manage.py runvnode`; the sources themselves are vnode.kubelet's `certfiles`
(files) and `certcsr` (the CSR API), wired by `nebula_site.manager`.
Tests: tests/nebula_site/test_servingcert.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.core.management.base import CommandError

SOURCES = ("memory", "files", "csr")


def choose(
    options: Mapping[str, Any], nebula: Mapping[str, Any], address: str | None
) -> tuple[str, tuple[str, str] | None]:
    """(source, (cert, key) files or None). A certificate and key given mean "files" and go
    together; "files" needs both; "memory" and "csr" take neither; "csr" needs a node
    `address` (the certificate's SAN). Flags win over settings."""
    flags_cert, flags_key = options.get("kubelet_cert"), options.get("kubelet_key")
    cert = flags_cert or (None if flags_key else nebula.get("KUBELET_CERT")) or None
    key = flags_key or (None if flags_cert else nebula.get("KUBELET_KEY")) or None
    if bool(cert) != bool(key):
        raise CommandError("--kubelet-cert and --kubelet-key (NEBULA_KUBELET_CERT and _KEY) go together")
    source = options.get("kubelet_cert_source") or ("files" if cert else nebula.get("KUBELET_CERT_SOURCE") or "memory")
    if source not in SOURCES:
        raise CommandError(f"the kubelet certificate source must be one of {', '.join(SOURCES)}, not {source!r}")
    if cert and key:
        if source != "files":
            raise CommandError(f"--kubelet-cert and --kubelet-key are for the files source, not {source!r}")
        return source, (cert, key)
    if source == "files":
        raise CommandError("the files certificate source needs --kubelet-cert and --kubelet-key")
    if source == "csr" and not address:
        raise CommandError("the csr certificate source needs --node-ip or --node-dns-name (the certificate's SANs)")
    return source, None
