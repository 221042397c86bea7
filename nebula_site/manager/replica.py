"""This replica's Lease identity, and who is a replica of this install (issue 38's guard
against made-up members and console addresses: `kube.holders`).

Called once by `nebula_site.manager.main`. Running as a Pod (the Deployment sets POD_NAME and
POD_UID from the downward API), the identity is `<pod>-<uid>`, and holders are judged against
the Pods of the replica's own namespace (POD_NAMESPACE; the Lease namespace when unset).
Otherwise (dev, tests, `make run`) the identity is host-pid-nonce and every holder counts,
which the log says once. Never raises.
Tests: tests/nebula_site/test_sharing_managers.py (spoofed members), tests/kube/test_holders.py.
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
    pods = env.get("POD_NAMESPACE") or namespace
    logger.info("Lease holders are checked: Pods of %s, by name and UID (this replica: %s)", pods, identity)
    return identity, PodHolders(kube, namespace=pods, own=identity)
