"""What the vnode remembers of one Pod, and the small vocabulary around it.

Shared by the Handler, the pod writer, the decisions and the pod controller. Pure data.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from providers.base import ClaimName, Instance, InstanceId, Tier
from providers.claim import claim_name
from vnode.env import MissingSource

JsonDict = dict[str, Any]


class Lookup(enum.Enum):
    FOUND = "found"
    NOT_FOUND = "not found"
    UNKNOWN = "could not ask"


class RetryLater(Exception):
    """The work for this Pod must be tried again (with backoff, or after `delay`)."""

    def __init__(self, message: str, *, delay: float | None = None, missing: MissingSource | None = None) -> None:
        super().__init__(message)
        self.delay = delay
        self.missing = missing


@dataclass
class Tracked:
    """What the Handler knows of one Pod bound to its node."""

    namespace: str
    name: str
    uid: str
    claim: ClaimName
    pod: JsonDict
    instance_id: InstanceId | None = None
    provisioned_at: float = 0.0  # monotonic; for the provider's list lag
    terminal: bool = False  # refused: there is no instance and never will be
    desired_annotations: dict[str, str] = field(default_factory=dict)
    written_annotations: dict[str, str] = field(default_factory=dict)
    desired_status: JsonDict | None = None
    written_status: JsonDict | None = None
    last_instance: Instance | None = None  # unchanged facts need no new status

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def pod_key(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


def pod_claim(pod: Mapping[str, Any]) -> ClaimName:
    meta = pod.get("metadata") or {}
    return claim_name(str(meta.get("namespace")), str(meta.get("name")), str(meta.get("uid")))


def tier_from(text: str | None) -> Tier | None:
    """The tier an annotation names (case-insensitive), or None."""
    for tier in Tier:
        if text and text.lower() == tier.value.lower():
            return tier
    return None
