"""Given-up Pods replaced: a refused or interrupted Pod a ReplicaSet (any controller but a Job)
owns is deleted, so its owner makes a fresh gated one, which skips the blocked candidate.

Called by the placement controller for a Pod `request.is_replaceable_failure` picks; one
delete (preconditioned on the uid) and one Event. Never writes the blocklist.
Tests: tests/placement/test_replace_given_up.py.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from kube import names
from kube.client import ConflictError, Kube, KubeError, NotFoundError, path_for
from placement.request import replacement_cause

logger = logging.getLogger(__name__)

Say = Callable[[dict[str, Any], str, str, str], None]  # (pod, type, reason, message): an Event


def replace_given_up(kube: Kube, pod: dict[str, Any], say: Say) -> None:
    """Delete the given-up Pod (only this uid) and say so on it."""
    meta = pod["metadata"]
    path = path_for("pods", namespace=meta["namespace"], name=meta["name"])
    try:
        kube.delete(path, uid=meta.get("uid"))
    except (NotFoundError, ConflictError):
        return  # gone already, or the name now belongs to a new Pod
    except KubeError as exc:
        logger.warning("could not delete given-up Pod %s/%s: %s", meta["namespace"], meta["name"], exc)
        return
    logger.info("deleted given-up Pod %s/%s so its owner replaces it", meta["namespace"], meta["name"])
    say(pod, "Normal", names.EVENT_REPLACING, f"deleted after {replacement_cause(pod)}")
