"""Reading a test's Pods back from the cluster: the object or None, and its phase.

Used by the vnode, kubelet and console rigs and tests; reads only, in namespace `default`.
"""

from __future__ import annotations

from typing import Any

from kube.client import Kube, NotFoundError, path_for


def get_pod(kube: Kube, name: str) -> dict[str, Any] | None:
    """The Pod `default/<name>`, or None once it is gone."""
    try:
        return kube.get(path_for("pods", namespace="default", name=name))
    except NotFoundError:
        return None


def phase_of(kube: Kube, name: str) -> str | None:
    """The Pod's status.phase; None if it has none yet or is gone."""
    pod = get_pod(kube, name)
    return None if pod is None else (pod.get("status") or {}).get("phase")
