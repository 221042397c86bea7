"""Who is a replica of this install, by its Lease identity: the guard against made-up members
and console addresses written by someone who is not a replica (anyone RBAC lets write Leases
in the manager's namespace).

Used by `kube.leases` (which member Leases count, who `LeaseReader.holder` names, and which
live holder is a `stranger` whose Lease may be taken over) and by the console's leader peer
(`addresses`: a standby forwards only to the leader Pod's IPs). Fencing never depends on it: a
Lease taken from a stranger is written for only a full duration later (`kube.leases`), so even
a wrong judgement cannot let two replicas serve one provider. A replica that runs as a Pod names itself
`<pod name>-<pod uid>` (`pod_identity`: a valid Lease name part); `PodHolders` trusts that
identity only if the Pod exists in the manager's namespace with that UID (identities of
earlier versions, host-pid-nonce, are not trusted: they count less, and are strangers). No
label is asked: whoever may create Pods there may run one as the manager's ServiceAccount
anyway. Anything else is ignored, and said once per holder in the log. When it cannot tell
(the Pods cannot be listed for TRUST_TTL, or more than MAX_PODS) it trusts no other holder:
counting too few members only makes each share larger, no holder is a stranger, and no
console is forwarded to. `ANY` trusts everyone (not running as a Pod: dev and tests).
Tests: tests/kube/test_holders.py, tests/kube/test_lease_strangers.py,
tests/nebula_site/test_sharing_managers.py (spoofed members and Leases).
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
REFRESH = 1.0  # seconds at least between two lists (a holder not among those listed; after a failed one)
REMEMBERED = 256  # holders already said in the log, remembered at most (I7: made-up names cannot grow memory)
MAX_PODS = 1024  # Pods of the manager's namespace judged from one list; more: no other holder trusted (I7)
_POD_FORM = re.compile(
    r"(?P<pod>[a-z0-9][a-z0-9.-]*)-(?P<uid>[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})"
)
Pods = dict[str, tuple[str, frozenset[str]]]  # Pod name -> (uid, IPs)


def pod_identity(pod: str, uid: str) -> str:
    """The Lease identity of the replica running as Pod `pod` (UID `uid`)."""
    return f"{pod}-{uid}"


def parse_identity(identity: str) -> tuple[str, str] | None:
    """(Pod name, UID) of an identity `pod_identity` made, None for any other text."""
    found = _POD_FORM.fullmatch(identity)
    return (found["pod"], found["uid"]) if found else None


class Holders(Protocol):
    def trusted(self, identity: str) -> bool:
        """Is `identity` a replica of this install? (The empty holder is nobody: True.)"""

    def replica_of(self, identity: str) -> str:
        """What one replica's identities share (its Pod), to count each replica once."""

    def addresses(self, identity: str) -> frozenset[str] | None:
        """The Pod IPs of a trusted holder (empty: none known); None when not checked (`ANY`)."""

    def stranger(self, identity: str, since: float) -> str:
        """Why `identity` is known not to be a replica, by a list of the Pods begun after
        `since` (this process's clock; when the holder was first seen): a replica's Pod exists
        before it can write, so such a list shows it. "" when it may be one, or cannot be told."""


class AnyHolder:
    """Trusts every holder: a replica not running as a Pod cannot tell."""

    def trusted(self, identity: str) -> bool:
        return True

    def replica_of(self, identity: str) -> str:
        return identity

    def addresses(self, identity: str) -> frozenset[str] | None:
        return None

    def stranger(self, identity: str, since: float) -> str:
        return ""


ANY = AnyHolder()


class PodHolders:
    """Trusts holders that are live Pods of `namespace` (see the module docstring). Thread-safe.
    The Pods are listed at most every TRUST_TTL, and again (at most every REFRESH seconds) for
    a holder not among them or a Pod with no IP yet, by one thread while the others wait for
    its answer: a replica that just started is known within a round, and no number of made-up
    holders or callers, nor a failing API server, costs more. A failed list keeps the last good
    one until it is TRUST_TTL old; then, until a list succeeds, no other holder is trusted."""

    def __init__(self, kube: Kube, *, namespace: str, own: str, clock: Callable[[], float] = time.monotonic) -> None:
        self._kube = kube
        self._namespace = namespace
        self._own = own
        self._clock = clock
        self._pods: Pods | None = None  # the last good list; None: none, or over MAX_PODS
        self._good_at = float("-inf")  # when it was listed
        self._good_from = float("-inf")  # when that list was asked for
        self._tried_at = float("-inf")  # the last list, good or not
        self._failing = False
        self._reported: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()
        self._listing = threading.Lock()

    def trusted(self, identity: str) -> bool:
        if identity in ("", self._own):
            return True
        why = self._judge(identity)
        if why:
            self._report(identity, why)
        return not why

    def replica_of(self, identity: str) -> str:
        named = parse_identity(identity)
        return named[0] if named else identity

    def addresses(self, identity: str) -> frozenset[str] | None:
        named = parse_identity(identity)
        if named is None or self._judge(identity):
            return frozenset()
        known = self._pods_now(refresh=lambda pods: not pods.get(named[0], ("", frozenset()))[1])
        return frozenset() if known is None else known.get(named[0], ("", frozenset()))[1]

    def stranger(self, identity: str, since: float) -> str:
        if identity in ("", self._own):
            return ""
        if parse_identity(identity) is None:
            return "not of the form <pod>-<uid>"
        with self._lock:
            stale = self._good_from <= since
        if stale:
            self._pods_now(refresh=lambda pods: True)  # at most every REFRESH, one lister at a time
            with self._lock:
                if self._good_from <= since:
                    return ""  # no list begun after the holder was seen (yet): cannot tell
        why = self._judge(identity)
        return "" if why.startswith("the Pods of") else why

    def _judge(self, identity: str) -> str:
        """Why `identity` is not a replica ("": it is)."""
        named = parse_identity(identity)
        if named is None:
            return "not of the form <pod>-<uid>"
        pod, uid = named
        known = self._pods_now(refresh=lambda pods: pods.get(pod, ("", frozenset()))[0] != uid)
        if known is None:
            return f"the Pods of {self._namespace} cannot be listed"
        found = known.get(pod)
        if found is None:
            return f"no Pod {self._namespace}/{pod}"
        if found[0] != uid:
            return f"Pod {self._namespace}/{pod} has another UID"
        return ""

    def _pods_now(self, refresh: Callable[[Pods], bool]) -> Pods | None:
        """The last good list if it is fresh: listed again when it is TRUST_TTL old, or when
        `refresh` says it lacks something and the last try is REFRESH old. One lister at a time."""
        if not self._due(refresh):
            return self._current()
        with self._listing:
            if self._due(refresh):  # not listed meanwhile by another caller
                self._list()
        return self._current()

    def _due(self, refresh: Callable[[Pods], bool]) -> bool:
        with self._lock:
            now, pods = self._clock(), self._pods
            since_good, since_tried = now - self._good_at, now - self._tried_at
        if since_tried < REFRESH:
            return False
        return since_good >= TRUST_TTL or pods is None or refresh(pods)

    def _current(self) -> Pods | None:
        with self._lock:
            return self._pods if self._clock() - self._good_at < TRUST_TTL else None

    def _list(self) -> None:
        asked = self._clock()
        try:
            items, _ = self._kube.list(path_for("pods", namespace=self._namespace))
        except KubeError as exc:
            with self._lock:
                self._tried_at, first = self._clock(), not self._failing
                self._failing = True
            if first:
                logger.warning(
                    "cannot list the Pods of %s (Lease holders judged by the last list): %s", self._namespace, exc
                )
            return
        pods: Pods | None = None
        if len(items) > MAX_PODS:
            many = len(items)
            logger.warning(
                "%s holds %d Pods, over %d: no other Lease holder counts now", self._namespace, many, MAX_PODS
            )
        else:
            pods = {}
            for item in items:
                meta, status = item.get("metadata") or {}, item.get("status") or {}
                ips = {str(p.get("ip")) for p in status.get("podIPs") or [] if isinstance(p, dict) and p.get("ip")}
                if status.get("podIP"):
                    ips.add(str(status["podIP"]))
                pods[str(meta.get("name", ""))] = (str(meta.get("uid", "")), frozenset(ips))
        with self._lock:
            now = self._clock()
            self._pods, self._good_at, self._tried_at, self._failing = pods, now, now, False
            self._good_from = asked

    def _report(self, identity: str, why: str) -> None:
        with self._lock:
            if identity in self._reported:
                return
            self._reported[identity] = None
            while len(self._reported) > REMEMBERED:
                self._reported.popitem(last=False)
        logger.warning("lease holder %r is not a replica of this install (%s): ignored", identity[:300], why)
