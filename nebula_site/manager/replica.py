"""This replica's Lease identity, and who else may hold a Lease of this install (issue 38's
guard against spoofed Leases: `kube.holders`).

Called once by `nebula_site.manager.main`. Running as a Pod (the Deployment sets POD_NAME and
POD_UID from the downward API), the identity is `<pod>_<uid>` and holders are checked against
the manager's Pods: same namespace, same UID, and this Pod's `app.kubernetes.io/*` labels.
Otherwise (dev, tests, `make run`) the identity is host-pid-nonce and every holder is trusted,
which the log says once. Never raises: a Pod that cannot be read checks the UID alone.
Tests: tests/nebula_site/test_sharing_managers.py (spoofed Leases), tests/kube/test_holders.py.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections.abc import Mapping

from kube.client import Kube, KubeError, path_for
from kube.holders import ANY, Holders, PodHolders, pod_identity

logger = logging.getLogger(__name__)

SELECTING = ("app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/component")


def replica(kube: Kube, namespace: str, environ: Mapping[str, str] | None = None) -> tuple[str, Holders]:
    """(identity, holders) for this process (see the module docstring)."""
    env = os.environ if environ is None else environ
    pod, uid = env.get("POD_NAME", ""), env.get("POD_UID", "")
    if not pod or not uid:
        logger.info("Lease holders are not checked: POD_NAME and POD_UID are not set (not running as a Pod)")
        return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}", ANY
    identity = pod_identity(pod, uid)
    labels: dict[str, str] = {}
    try:
        own = kube.get(path_for("pods", namespace=namespace, name=pod))
        found = (own.get("metadata") or {}).get("labels") or {}
        labels = {key: str(found[key]) for key in SELECTING if key in found}
    except KubeError as exc:
        logger.warning(
            "cannot read this replica's Pod %s/%s (Lease holders checked by UID only): %s", namespace, pod, exc
        )
    logger.info("Lease holders are checked: Pods of %s with UID and labels %s", namespace, labels or "{}")
    return identity, PodHolders(kube, namespace=namespace, own=identity, labels=labels)
