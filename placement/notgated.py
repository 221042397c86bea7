"""An opted-in Pod that arrived without placement's scheduling gate (no mutating webhook gated
it, as in a cluster where deploy/webhook was never applied): how to tell one, what its one
Warning Event says, and the memory that makes that Event one per Pod.

Called by the placement controller's Pod sync (`NotGatedRegister.warn`, with its Event writer). `is_not_gated` and
`warning` are pure; `NotGatedRegister` is thread-safe and memory only (after a restart each
such Pod is warned once more). Never does I/O, never changes the Pod (a gate cannot be added
after creation). Tests:
tests/placement/test_not_gated.py::test_an_ungated_opted_in_pod_gets_one_warning_naming_the_webhook.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from kube import names, observe
from placement.request import FAILED_PHASE, labels

WEBHOOK_CONFIGURATION = "nebula-placement"  # metadata.name in deploy/webhook/mutatingwebhookconfiguration.yaml
# That manifest's namespaceSelector: Pods in these namespaces are never sent to the webhook.
UNSENT_NAMESPACES = frozenset({"kube-system", "kube-public", "kube-node-lease", "nebula-system"})


def is_not_gated(pod: Mapping[str, Any]) -> bool:
    """Opted in, not bound, not deleting, not finished, never placed, yet without our gate."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    if labels(pod).get(names.ENABLED_LABEL) != "true" or meta.get("deletionTimestamp") or spec.get("nodeName"):
        return False
    if (pod.get("status") or {}).get("phase") in ("Succeeded", FAILED_PHASE):
        return False
    if (meta.get("annotations") or {}).get(names.POOL_ANNOTATION):
        return False  # placement ungated it: it is placed and waits for the scheduler
    return not any(g.get("name") == names.PLACEMENT_GATE for g in spec.get("schedulingGates") or [])


def warning(pod: Mapping[str, Any]) -> str:
    """The NotGated Event's message: why placement will not act, and what to do."""
    gate = f"the {names.PLACEMENT_GATE} scheduling gate"
    head = f"opted in ({names.ENABLED_LABEL}=true) but created without {gate}, so placement cannot place it"
    namespace = (pod.get("metadata") or {}).get("namespace", "")
    if namespace in UNSENT_NAMESPACES:
        return (
            f"{head}: the MutatingWebhookConfiguration {WEBHOOK_CONFIGURATION} does not gate Pods in namespace"
            f" {namespace}; create the Pod in another namespace"
        )
    return (
        f"{head}: the MutatingWebhookConfiguration {WEBHOOK_CONFIGURATION} is not registered or did not run."
        f" Apply it (kubectl apply -k deploy/webhook) and recreate the Pod, or create the Pod with"
        f" spec.schedulingGates [{{name: {names.PLACEMENT_GATE}}}] and the toleration"
        f" {{key: {names.PROVIDER_KEY}, operator: Exists, effect: NoSchedule}}"
    )


class NotGatedRegister:
    """The ungated opted-in Pods already warned about, by key, with the uid warned."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._warned: dict[str, str] = {}

    def due(self, key: str, uid: str) -> bool:
        """True the first time `key` is seen with `uid` (a same-named new Pod is due again)."""
        with self._lock:
            if self._warned.get(key) == uid:
                return False
            self._warned[key] = uid
            return True

    def forget(self, key: str) -> None:
        with self._lock:
            self._warned.pop(key, None)

    def warn(self, key: str, pod: dict[str, Any] | None, say: Callable[[dict[str, Any], str, str, str], None]) -> None:
        """One NotGated Warning (through `say`) per opted-in Pod created without our gate."""
        if pod is None or not is_not_gated(pod):
            self.forget(key)
        elif self.due(key, str(pod["metadata"].get("uid", ""))):
            observe.current().placement_decided("not_gated")
            say(pod, "Warning", names.EVENT_NOT_GATED, warning(pod))
