"""Who may hold a Lease of this install: the guard against Leases written by someone who is not
a replica (anyone RBAC lets write Leases in the manager's namespace).

Used by `kube.leases` (every rule that reads a holder: alive, members, takeable, the fence's
revocation) through `Holders.trusted`, and by the console's leader peer (`addresses`). A
replica that runs as a Pod names itself `<pod name>_<pod uid>` (`pod_identity`); `PodHolders`
trusts a holder only if that Pod exists in the manager's namespace with that UID. (No label is
asked: whoever may create Pods there may run one as the manager's ServiceAccount anyway, and a
label the replicas disagreed on would let two of them serve one provider.) Anything else (a
made-up name, a Pod that is gone, another UID) is ignored, and said once per holder in the
log. It fails open: when the Pods cannot be listed (the API server errs, or the namespace holds
more than MAX_PODS), every holder is trusted, since wrongly distrusting a live replica would let
two replicas serve one provider. `ANY` trusts everyone (not running as a Pod: dev and tests).
Tests: tests/kube/test_holders.py, tests/nebula_site/test_sharing_managers.py (spoofed Leases).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Protocol

from kube.client import Kube, KubeError, path_for

logger = logging.getLogger(__name__)

SEPARATOR = "_"  # in no Pod name and no UID
TRUST_TTL = 10.0  # seconds the list of the manager's Pods is kept
REFRESH = 1.0  # seconds at least between two lists, when a holder is not among the Pods listed
REMEMBERED = 256  # holders already said in the log, remembered at most (I7: made-up names cannot grow memory)
MAX_PODS = 1024  # Pods of the manager's namespace judged from one list; more: not checked (I7)


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
    """Trusts holders that are live Pods of `namespace` (see the module docstring).
    Thread-safe. The Pods are listed at most every TRUST_TTL, and
    again, at most every REFRESH seconds, when a holder is not among them: a replica that just
    started is known within a round, and no number of made-up holders costs more reads."""

    def __init__(
        self,
        kube: Kube,
        *,
        namespace: str,
        own: str,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._kube = kube
        self._namespace = namespace
        self._own = own
        self._clock = clock
        self._pods: dict[str, tuple[str, frozenset[str]]] = {}  # Pod name -> (uid, IPs)
        self._listed_at = float("-inf")
        self._reported: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()

    def trusted(self, identity: str) -> bool:
        if identity in ("", self._own):
            return True
        why = self._judge(identity)
        if why:
            self._report(identity, why)
        return not why

    def addresses(self, identity: str) -> frozenset[str] | None:
        named = parse_identity(identity)
        if named is None or self._judge(identity):
            return frozenset()
        with self._lock:
            return self._pods.get(named[0], ("", frozenset()))[1]

    def _judge(self, identity: str) -> str:
        """Why `identity` is not trusted ("": it is)."""
        named = parse_identity(identity)
        if named is None:
            return "not of the form <pod>_<uid>"
        pod, uid = named
        with self._lock:
            age = self._clock() - self._listed_at
            known = self._pods.get(pod)
        if age >= TRUST_TTL or (known is None or known[0] != uid) and age >= REFRESH:
            if not self._list():
                return ""  # fail open: distrusting a live replica would let two serve one provider
            with self._lock:
                known = self._pods.get(pod)
        if known is None:
            return f"no Pod {self._namespace}/{pod}"
        if known[0] != uid:
            return f"Pod {self._namespace}/{pod} has another UID"
        return ""

    def _list(self) -> bool:
        try:
            items, _ = self._kube.list(path_for("pods", namespace=self._namespace))
        except KubeError as exc:
            logger.debug("cannot list the Pods of %s (every Lease holder trusted meanwhile): %s", self._namespace, exc)
            return False
        if len(items) > MAX_PODS:
            logger.warning(
                "%s holds %d Pods, over %d: Lease holders are not checked this round",
                self._namespace,
                len(items),
                MAX_PODS,
            )
            return False
        pods: dict[str, tuple[str, frozenset[str]]] = {}
        for item in items:
            meta, status = item.get("metadata") or {}, item.get("status") or {}
            ips = {str(p.get("ip")) for p in status.get("podIPs") or [] if isinstance(p, dict) and p.get("ip")}
            if status.get("podIP"):
                ips.add(str(status["podIP"]))
            pods[str(meta.get("name", ""))] = (str(meta.get("uid", "")), frozenset(ips))
        with self._lock:
            self._pods, self._listed_at = pods, self._clock()
        return True

    def _report(self, identity: str, why: str) -> None:
        with self._lock:
            if identity in self._reported:
                return
            self._reported[identity] = None
            while len(self._reported) > REMEMBERED:
                self._reported.popitem(last=False)
        logger.warning("lease holder %r is not a replica of this install (%s): ignored", identity[:300], why)
