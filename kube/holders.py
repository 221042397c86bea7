"""Who may hold a Lease of this install: the guard against Leases written by someone who is not
a replica (anyone RBAC lets write Leases in the manager's namespace).

Used by `kube.leases` (every rule that reads a holder: alive, members, takeable, the fence's
revocation) through `Holders.trusted`, and by the console's leader peer (`addresses`). A
replica that runs as a Pod names itself `<pod name>_<pod uid>` (`pod_identity`); `PodHolders`
trusts a holder only if that Pod exists in the manager's namespace with that UID and carries
the manager's labels. Anything else (a made-up name, a Pod that is gone or is another's) is
ignored, and said once per holder in the log. It fails open: when the Pod cannot be read (the
API server errs), the holder is trusted, since wrongly distrusting a live replica would let
two replicas serve one provider. `ANY` trusts everyone (not running as a Pod: dev and tests).
Tests: tests/kube/test_holders.py, tests/nebula_site/test_sharing_managers.py (spoofed Leases).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from kube.client import Kube, KubeError, NotFoundError, path_for

logger = logging.getLogger(__name__)

SEPARATOR = "_"  # in no Pod name and no UID
TRUST_TTL = 10.0  # seconds a judgement of one holder is kept
REMEMBERED = 256  # holders judged and remembered at most (I7: spoofed names cannot grow memory)


def pod_identity(pod: str, uid: str) -> str:
    """The Lease identity of the replica running as Pod `pod` (UID `uid`)."""
    return f"{pod}{SEPARATOR}{uid}"


def parse_identity(identity: str) -> tuple[str, str] | None:
    """(Pod name, UID) of an identity `pod_identity` made, None for any other text."""
    pod, sep, uid = identity.partition(SEPARATOR)
    if not sep or not pod or not uid or SEPARATOR in uid:
        return None
    return pod, uid


class Holders(Protocol):
    def trusted(self, identity: str) -> bool:
        """May `identity` hold a Lease of this install? (The empty holder is nobody: True.)"""

    def addresses(self, identity: str) -> frozenset[str] | None:
        """The Pod IPs of a trusted holder; None when they are not checked (`ANY`)."""


class AnyHolder:
    """Trusts every holder: a replica not running as a Pod cannot tell."""

    def trusted(self, identity: str) -> bool:
        return True

    def addresses(self, identity: str) -> frozenset[str] | None:
        return None


ANY = AnyHolder()


class PodHolders:
    """Trusts holders that are live manager Pods of `namespace` (see the module docstring).
    Thread-safe; at most one read of a Pod per holder per TRUST_TTL."""

    def __init__(
        self,
        kube: Kube,
        *,
        namespace: str,
        own: str,
        labels: Mapping[str, str],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._kube = kube
        self._namespace = namespace
        self._own = own
        self._labels = dict(labels)
        self._clock = clock
        self._judged: OrderedDict[str, tuple[float, bool, frozenset[str]]] = OrderedDict()
        self._reported: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()

    def trusted(self, identity: str) -> bool:
        if identity in ("", self._own):
            return True
        return self._judge(identity)[0]

    def addresses(self, identity: str) -> frozenset[str] | None:
        return self._judge(identity)[1]

    def _judge(self, identity: str) -> tuple[bool, frozenset[str]]:
        now = self._clock()
        with self._lock:
            kept = self._judged.get(identity)
            if kept is not None and now - kept[0] < TRUST_TTL:
                return kept[1], kept[2]
        trusted, addresses, why = self._read(identity)
        with self._lock:
            self._judged[identity] = (now, trusted, addresses)
            self._judged.move_to_end(identity)
            while len(self._judged) > REMEMBERED:
                self._judged.popitem(last=False)
            first = not trusted and identity not in self._reported
            if first:
                self._reported[identity] = None
                while len(self._reported) > REMEMBERED:
                    self._reported.popitem(last=False)
        if first:
            logger.warning("lease holder %r is not a replica of this install (%s): ignored", identity[:300], why)
        return trusted, addresses

    def _read(self, identity: str) -> tuple[bool, frozenset[str], str]:
        named = parse_identity(identity)
        if named is None:
            return False, frozenset(), "not of the form <pod>_<uid>"
        pod_name, uid = named
        try:
            pod: dict[str, Any] = self._kube.get(path_for("pods", namespace=self._namespace, name=pod_name))
        except NotFoundError:
            return False, frozenset(), f"no Pod {self._namespace}/{pod_name}"
        except KubeError as exc:  # fail open: distrusting a live replica would double-serve
            logger.debug("cannot read the Pod of lease holder %r (trusted meanwhile): %s", identity, exc)
            return True, frozenset(), ""
        meta = pod.get("metadata") or {}
        if meta.get("uid") != uid:
            return False, frozenset(), f"Pod {self._namespace}/{pod_name} has another UID"
        labels = meta.get("labels") or {}
        if any(labels.get(k) != v for k, v in self._labels.items()):
            return False, frozenset(), f"Pod {self._namespace}/{pod_name} is not a manager Pod (labels)"
        status = pod.get("status") or {}
        ips = {str(p.get("ip")) for p in status.get("podIPs") or [] if isinstance(p, dict) and p.get("ip")}
        if status.get("podIP"):
            ips.add(str(status["podIP"]))
        return True, frozenset(ips), ""
