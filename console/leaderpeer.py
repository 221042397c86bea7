"""Where the leader's console answers: published by the leader on its Lease, read by standbys.

The process wiring (`nebula_site.manager`) gives the leader elector `lease_annotations(peer)` to
write, and installs `LeaseLocator` in `console.runtime` so a standby's forwarder
(`console.forward`) finds the leader, judged as the elector judges it (`kube.leases`: by this
process's monotonic clock, never the holder's wall clock). The fingerprint is a SHA-256 of the
certificate the leader's console serves: the API server is the trusted channel for it, since the
replicas' certificates do not name the Pod IPs. Never a secret here: a URL and a certificate hash.
Tests: tests/console/test_forward.py, tests/kube/test_leader.py, tests/kube/test_holders.py.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from kube import leases, names
from kube.client import Kube, KubeError
from kube.holders import ANY, Holders

FINGERPRINT = re.compile(r"[0-9a-f]{64}")


class NoLeader(Exception):
    """No leader's console can be named now; the message says why, in one line."""


class HeldHere(Exception):
    """This process holds the leader Lease: it answers its own requests, even while its
    controllers start or stop (its memory is then the leader's, however empty)."""


@dataclass(frozen=True)
class Peer:
    """A console's address: `url` is scheme://host:port; `fingerprint` the lower-case hex
    SHA-256 of its certificate (DER), None for a plain-HTTP console."""

    url: str
    fingerprint: str | None = None

    @property
    def host(self) -> str:
        return urlsplit(self.url).hostname or ""

    @property
    def port(self) -> int:
        parts = urlsplit(self.url)
        return parts.port or (443 if parts.scheme == "https" else 80)

    @property
    def tls(self) -> bool:
        return urlsplit(self.url).scheme == "https"


def fingerprint_of(cert_der: bytes) -> str:
    return hashlib.sha256(cert_der).hexdigest()


def console_url(*, tls: bool, host: str, port: int) -> str:
    """The URL of a console listening on `host:port` (an IPv6 address in brackets)."""
    where = f"[{host}]" if ":" in host else host
    return f"{'https' if tls else 'http'}://{where}:{port}"


def lease_annotations(peer: Peer | None) -> dict[str, str]:
    """What the leader writes on its Lease for `peer` (nothing when it serves no console)."""
    if peer is None:
        return {}
    published = {names.CONSOLE_URL_ANNOTATION: peer.url}
    if peer.fingerprint is not None:
        published[names.CONSOLE_CERT_SHA256_ANNOTATION] = peer.fingerprint
    return published


def peer_from(published: Mapping[str, str]) -> Peer:
    """Pure: the Peer a Lease's annotations name. NoLeader when they name none, or an https
    URL comes without a well-formed fingerprint (never forward unpinned)."""
    url = published.get(names.CONSOLE_URL_ANNOTATION, "")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise NoLeader("the leader publishes no console address on its Lease")
    if parts.scheme == "http":
        return Peer(url)
    fingerprint = published.get(names.CONSOLE_CERT_SHA256_ANNOTATION, "").lower()
    if not FINGERPRINT.fullmatch(fingerprint):
        raise NoLeader("the leader's console is https but its Lease names no certificate fingerprint")
    return Peer(url, fingerprint)


class LeaseLocator:
    """Reads the leader Lease on each call (into one `kube.leases` view, so a holder that stops
    renewing is gone a duration after this process last saw it renew): the console of whoever
    holds it, unless that is this process (`identity`), which serves its own requests once it leads.
    With `holders` that check Pods (`kube.holders.PodHolders`), only a holder that is a replica
    of this install is forwarded to, and only if its console URL names one of its Pod's IPs: a
    Lease edited by someone else sends no request elsewhere."""

    def __init__(
        self,
        kube: Kube,
        *,
        namespace: str,
        name: str,
        identity: str,
        clock: Callable[[], float] = time.monotonic,
        holders: Holders = ANY,
    ) -> None:
        self._reader = leases.LeaseReader(kube, namespace=namespace, clock=clock, holders=holders)
        self._holders = holders
        self._name = name
        self._identity = identity

    def __call__(self) -> Peer:
        try:
            holder = self._reader.holder(self._name)
        except KubeError as exc:
            raise NoLeader(f"cannot read the leader Lease: {exc}") from exc
        if holder is None:
            raise NoLeader("no replica holds the leader Lease")
        if holder.identity == self._identity:
            raise HeldHere()
        peer = peer_from(holder.annotations)
        addresses = self._holders.addresses(holder.identity)
        if addresses is not None and not _among(peer.host, addresses):
            raise NoLeader(f"the leader Lease names a console at {peer.host}, not an address of its holder's Pod")
        return peer


def _among(host: str, addresses: frozenset[str]) -> bool:
    """Is `host` one of `addresses`, as IP addresses (an IPv6 address however it is written)?"""
    try:
        wanted = ipaddress.ip_address(host)
    except ValueError:
        return host in addresses
    for address in addresses:
        try:
            if ipaddress.ip_address(address) == wanted:
                return True
        except ValueError:
            continue
    return False
