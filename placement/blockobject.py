"""A blocklist entry as an object of the cluster: `blocklistentries.nebula.io` (BlocklistEntry).

Pure: `encode` builds the object a replica writes, `decode` reads one back into a `BlockEntry`
(raising `BlockObjectError` for anything malformed), `expires_of` reads its expiry. Used by
`placement.blockwriter` and `placement.blockstore`; never does I/O.
Tests: tests/placement/test_blockstore_object.py.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

from kube.client import path_for
from placement.blocklist import BlockEntry, describe_scope, entry_id
from providers.base import BlockBreadth, BlockScope, Tier

JsonDict = dict[str, Any]

GROUP = "nebula.io"
VERSION = "v1alpha1"
PLURAL = "blocklistentries"
KIND = "BlocklistEntry"
ENTRIES = path_for(PLURAL, group=GROUP, version=VERSION)
MAX_REASON = 1024  # characters of a refusal's reason kept in the object (the CRD's maxLength)
MAX_TEXT = 253  # provider, accelerator, region, pool (the CRD's maxLength)
_TIME = "%Y-%m-%dT%H:%M:%S.%fZ"


class BlockObjectError(ValueError):
    """A BlocklistEntry that does not describe an entry (a field missing, of the wrong type, or
    a name that is not its scope's id)."""


def entry_path(name: str) -> str:
    return path_for(PLURAL, name=name, group=GROUP, version=VERSION)


def time_text(epoch: float) -> str:
    """RFC 3339 in UTC with microseconds (what the CRD's `date-time` fields hold)."""
    return datetime.fromtimestamp(epoch, UTC).strftime(_TIME)


def encode(entry: BlockEntry, *, created: float) -> JsonDict:
    """The whole object for `entry`. `created`: the object's creation time (now for a create,
    its creationTimestamp for an update), from which `ttlSeconds` counts, so `kubectl get`'s
    TTL minus its Age is the time left."""
    scope = entry.scope
    expires = entry.expires_at.timestamp()
    spec: JsonDict = {
        "provider": entry.provider,
        "breadth": scope.breadth.value,
        "scope": describe_scope(entry.provider, scope)[:MAX_REASON],
        "reason": entry.reason[:MAX_REASON],
        "recordedAt": time_text(entry.recorded_at.timestamp()),
        "expiresAt": time_text(expires),
        "ttlSeconds": max(1, math.ceil(expires - created)),
    }
    optional = {"tier": scope.tier.value if scope.tier else None, "accelerator": scope.accelerator}
    optional |= {"region": scope.region, "pool": entry.pool}
    spec |= {key: value[:MAX_TEXT] for key, value in optional.items() if value}
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "metadata": {"name": entry.id}, "spec": spec}


def expires_of(obj: JsonDict) -> float | None:
    """The object's `spec.expiresAt` as epoch seconds; None when it has none that parses."""
    spec = obj.get("spec")
    text = spec.get("expiresAt") if isinstance(spec, dict) else None
    return _parse_time(text) if isinstance(text, str) else None


def created_of(obj: JsonDict) -> float | None:
    text = (obj.get("metadata") or {}).get("creationTimestamp")
    return _parse_time(text) if isinstance(text, str) else None


def decode(obj: JsonDict, *, now: float) -> BlockEntry:
    """The entry `obj` describes, `seconds_left` as of `now`. BlockObjectError when malformed."""
    name = str((obj.get("metadata") or {}).get("name") or "")
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        raise BlockObjectError(f"blocklist entry {name}: no spec")
    provider = _text(spec, "provider", name, required=True)
    try:
        breadth = BlockBreadth(spec.get("breadth"))
    except ValueError as exc:
        raise BlockObjectError(f"blocklist entry {name}: spec.breadth {spec.get('breadth')!r} is no breadth") from exc
    tier_text = _text(spec, "tier", name)
    tier = Tier.parse(tier_text) if tier_text else None
    if tier_text and tier is None:
        raise BlockObjectError(f"blocklist entry {name}: spec.tier {tier_text!r} is not a tier")
    reason = _text(spec, "reason", name)[:MAX_REASON]
    scope = BlockScope(
        provider,
        breadth,
        tier=tier,
        accelerator=_text(spec, "accelerator", name) or None,
        region=_text(spec, "region", name) or None,
        reason=reason,
    )
    expires = expires_of(obj)
    recorded_text = spec.get("recordedAt")
    recorded = _parse_time(recorded_text) if isinstance(recorded_text, str) else None
    if expires is None:
        raise BlockObjectError(f"blocklist entry {name}: spec.expiresAt is missing or not a time")
    if name != entry_id(provider, scope):
        raise BlockObjectError(f"blocklist entry {name}: the name is not its scope's id {entry_id(provider, scope)}")
    recorded = expires if recorded is None else min(recorded, expires)
    return BlockEntry(
        id=name,
        provider=provider,
        scope=scope,
        reason=reason,
        pool=_text(spec, "pool", name) or None,
        recorded_at=datetime.fromtimestamp(recorded, UTC),
        expires_at=datetime.fromtimestamp(expires, UTC),
        seconds_left=max(0.0, expires - now),
    )


def _text(spec: JsonDict, field: str, name: str, *, required: bool = False) -> str:
    value = spec.get(field)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value) or len(value) > MAX_REASON:
        raise BlockObjectError(f"blocklist entry {name}: spec.{field} must be a string of at most {MAX_REASON}")
    return value


def _parse_time(text: str) -> float | None:
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()
