"""Kubernetes Events for Pods and Nodes, written by the vnode.

Called by the vnode and placement. A repeat of the same (object, reason, message) within
`dedupe_seconds` is dropped, so a retry loop cannot flood the API server. Failures to
write an Event are logged, never raised. Messages are built by the caller from fixed text
and provider error messages, which never carry secrets (I4); see
tests/vnode/test_secrets.py::test_I4_env_values_and_credentials_reach_only_the_provider_and_connect_secret.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from kube import observe
from kube.client import Kube, KubeError, path_for
from kube.times import rfc3339

logger = logging.getLogger(__name__)


class EventRecorder:
    def __init__(
        self,
        kube: Kube,
        *,
        component: str,
        host: str = "",
        dedupe_seconds: float = 600.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._kube = kube
        self._component = component
        self._host = host
        self._dedupe = dedupe_seconds
        self._clock = clock
        self._seen: dict[tuple[str, str, str], float] = {}
        self._lock = threading.Lock()

    def record(self, obj: Mapping[str, Any], kind: str, event_type: str, reason: str, message: str) -> None:
        """One Event about `obj` (a Pod or Node dict)."""
        meta = obj.get("metadata") or {}
        uid = str(meta.get("uid", ""))
        fingerprint = (uid or str(meta.get("name")), reason, message)
        now = self._clock()
        with self._lock:
            last = self._seen.get(fingerprint)
            if last is not None and now - last < self._dedupe:
                return
            self._seen[fingerprint] = now
            if len(self._seen) > 10000:
                self._seen = {k: t for k, t in self._seen.items() if now - t < self._dedupe}
        namespace = str(meta.get("namespace") or "default")
        observe.current().event_recorded(kind, namespace, str(meta.get("name")), event_type, reason, message)
        stamp = rfc3339(datetime.now(UTC))
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{meta.get('name')}.{uuid.uuid4().hex[:16]}", "namespace": namespace},
            "involvedObject": {
                "kind": kind,
                "apiVersion": "v1",
                "name": meta.get("name"),
                "namespace": meta.get("namespace", ""),
                "uid": uid,
            },
            "reason": reason,
            "message": message,
            "type": event_type,
            "source": {"component": self._component, "host": self._host},
            "reportingComponent": self._component,
            "reportingInstance": self._host,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        try:
            self._kube.create(path_for("events", namespace=namespace), event)
        except KubeError as exc:
            logger.warning("could not record event %s on %s/%s: %s", reason, namespace, meta.get("name"), exc)

    def pod(self, pod: Mapping[str, Any], event_type: str, reason: str, message: str) -> None:
        self.record(pod, "Pod", event_type, reason, message)

    def node(self, node: Mapping[str, Any], event_type: str, reason: str, message: str) -> None:
        self.record(node, "Node", event_type, reason, message)
