"""Who is a replica of this install, by its Lease identity: the guard against made-up members
and console addresses written by someone who is not a replica (anyone RBAC lets write Leases
in the manager's namespace).

Used by `kube.leases` (which member Leases count, and who `LeaseReader.holder` names) and by
the console's leader peer (`addresses`: a standby forwards only to the leader Pod's IPs).
Taking and fencing node and leader Leases never depend on it: a wrong judgement there could
let two replicas serve one provider. A replica that runs as a Pod names itself
`<pod name>-<pod uid>` (`pod_identity`: a valid Lease name part); `PodHolders` trusts that
identity only if the Pod exists in the manager's namespace with that UID, and an identity of
the form before it, `<pod name>-<pid>-<6 hex>` (replicas of an earlier version, during an
upgrade), if the Pod exists. No label is asked: whoever may create Pods there may run one as
the manager's ServiceAccount anyway. Anything else is ignored, and said once per holder in the
log. It fails open for members (the Pods cannot be listed, or more than MAX_PODS: everyone
counts) and closed for the console's address (no IPs known: no forwarding). `ANY` trusts
everyone (not running as a Pod: dev and tests).
Tests: tests/kube/test_holders.py, tests/nebula_site/test_sharing_managers.py (spoofed members).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Protocol

from kube.client import Kube, KubeError, path_for

logger = logging.getLogger(__name__)

TRUST_TTL = 10.0  # seconds the list of the namespace's Pods is kept
REFRESH = 1.0  # seconds at least between two lists (a holder not among those listed; a failed list)
REMEMBERED = 256  # holders already said in the log, remembered at most (I7: made-up names cannot grow memory)
MAX_PODS = 1024  # Pods of the manager's namespace judged from one list; more: not checked (I7)
_POD_FORM = re.compile(
    r"(?P<pod>[a-z0-9][a-z0-9.-]*)-(?P<uid>[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})"
)
_EARLIER_FORM = re.compile(r"(?P<pod>[a-z0-9][a-z0-9.-]*)-(?P<pid>[0-9]+)-(?P<nonce>[0-9a-f]{6})")


def pod_identity(pod: str, uid: str) -> str:
    """The Lease identity of the replica running as Pod `pod` (UID `uid`)."""
    return f"{pod}-{uid}"


def parse_identity(identity: str) -> tuple[str, str] | None:
    """(Pod name, UID) of an identity `pod_identity` made, None for any other text."""
    found = _POD_FORM.fullmatch(identity)
    return (found["pod"], found["uid"]) if found else None


def pod_of(identity: str) -> str | None:
    """The Pod an identity names, in this form or the earlier one; None for any other text."""
    found = _POD_FORM.fullmatch(identity) or _EARLIER_FORM.fullmatch(identity)
    return found["pod"] if found else None


class Holders(Protocol):
    def trusted(self, identity: str) -> bool:
        """Is `identity` a replica of this install? (The empty holder is nobody: True.)"""

    def replica_of(self, identity: str) -> str:
        """What one replica's identities share (its Pod), to count each replica once."""

    def addresses(self, identity: str) -> frozenset[str] | None:
        """The Pod IPs of a trusted holder (empty: none known); None when not checked (`ANY`)."""


class AnyHolder:
    """Trusts every holder: a replica not running as a Pod cannot tell."""

    def trusted(self, identity: str) -> bool:
        return True

    def replica_of(self, identity: str) -> str:
        return identity

    def addresses(self, identity: str) -> frozenset[str] | None:
        return None


ANY = AnyHolder()


class PodHolders:
    """Trusts holders that are live Pods of `namespace` (see the module docstring). Thread-safe.
    The Pods are listed at most every TRUST_TTL, and again (at most every REFRESH seconds) for
    a holder not among them or a Pod with no IP yet: a replica that just started is known
    within a round, and no number of made-up holders, nor a failing API server, costs more."""

    def __init__(self, kube: Kube, *, namespace: str, own: str, clock: Callable[[], float] = time.monotonic) -> None:
        self._kube = kube
        self._namespace = namespace
        self._own = own
        self._clock = clock
        self._pods: dict[str, tuple[str, frozenset[str]]] | None = None  # Pod name -> (uid, IPs); None: cannot tell
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

    def replica_of(self, identity: str) -> str:
        return pod_of(identity) or identity

    def addresses(self, identity: str) -> frozenset[str] | None:
        pod = pod_of(identity)
        if pod is None or self._judge(identity):
            return frozenset()
        known = self._pods_now(refresh=lambda pods: not (pods or {}).get(pod, ("", frozenset()))[1])
        return frozenset() if known is None else known.get(pod, ("", frozenset()))[1]

    def _judge(self, identity: str) -> str:
        """Why `identity` is not trusted ("": it is, or the Pods cannot be told)."""
        named, pod = parse_identity(identity), pod_of(identity)
        if pod is None:
            return "not of the form <pod>-<uid>"

        def unknown(pods: dict[str, tuple[str, frozenset[str]]] | None) -> bool:
            found = (pods or {}).get(pod)
            return found is None or named is not None and found[0] != named[1]

        known = self._pods_now(refresh=unknown)
        if known is None:
            return ""  # cannot tell: everyone counts
        found = known.get(pod)
        if found is None:
            return f"no Pod {self._namespace}/{pod}"
        if named is not None and found[0] != named[1]:
            return f"Pod {self._namespace}/{pod} has another UID"
        return ""

    def _pods_now(
        self, refresh: Callable[[dict[str, tuple[str, frozenset[str]]] | None], bool]
    ) -> dict[str, tuple[str, frozenset[str]]] | None:
        """The Pods as last listed, listed again when stale, or when `refresh` says the last
        list lacks something and it is REFRESH old."""
        with self._lock:
            age, pods = self._clock() - self._listed_at, self._pods
        if age >= TRUST_TTL or age >= REFRESH and refresh(pods):
            pods = self._list()
        return pods

    def _list(self) -> dict[str, tuple[str, frozenset[str]]] | None:
        pods: dict[str, tuple[str, frozenset[str]]] | None = None
        try:
            items, _ = self._kube.list(path_for("pods", namespace=self._namespace))
        except KubeError as exc:
            logger.debug("cannot list the Pods of %s (every member counts meanwhile): %s", self._namespace, exc)
            items = None
        if items is not None and len(items) > MAX_PODS:
            many = len(items)
            logger.warning("%s holds %d Pods, over %d: Lease holders not checked now", self._namespace, many, MAX_PODS)
        elif items is not None:
            pods = {}
            for item in items:
                meta, status = item.get("metadata") or {}, item.get("status") or {}
                ips = {str(p.get("ip")) for p in status.get("podIPs") or [] if isinstance(p, dict) and p.get("ip")}
                if status.get("podIP"):
                    ips.add(str(status["podIP"]))
                pods[str(meta.get("name", ""))] = (str(meta.get("uid", "")), frozenset(ips))
        with self._lock:
            self._pods, self._listed_at = pods, self._clock()
        return pods

    def _report(self, identity: str, why: str) -> None:
        with self._lock:
            if identity in self._reported:
                return
            self._reported[identity] = None
            while len(self._reported) > REMEMBERED:
                self._reported.popitem(last=False)
        logger.warning("lease holder %r is not a replica of this install (%s): ignored", identity[:300], why)
