"""This replica's Lease identity, and who else may hold a Lease of this install (issue 38's
guard against spoofed Leases: `kube.holders`).

Called once by `nebula_site.manager.main`. Running as a Pod (the Deployment sets POD_NAME and
POD_UID from the downward API), the identity is `<pod>_<uid>` and a holder counts only if it
names a Pod of the manager's namespace with its UID. Otherwise (dev, tests, `make run`) the
identity is host-pid-nonce and every holder is trusted, which the log says once. Never raises.
Tests: tests/nebula_site/test_sharing_managers.py (spoofed Leases), tests/kube/test_holders.py.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections.abc import Mapping

from kube.client import Kube
from kube.holders import ANY, Holders, PodHolders, pod_identity

logger = logging.getLogger(__name__)


def replica(kube: Kube, namespace: str, environ: Mapping[str, str] | None = None) -> tuple[str, Holders]:
    """(identity, holders) for this process (see the module docstring)."""
    env = os.environ if environ is None else environ
    pod, uid = env.get("POD_NAME", ""), env.get("POD_UID", "")
    if not pod or not uid:
        logger.info("Lease holders are not checked: POD_NAME and POD_UID are not set (not running as a Pod)")
        return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}", ANY
    identity = pod_identity(pod, uid)
    logger.info("Lease holders are checked: Pods of %s, by name and UID (this replica: %s)", namespace, identity)
    return identity, PodHolders(kube, namespace=namespace, own=identity)
