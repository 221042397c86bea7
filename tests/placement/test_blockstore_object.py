"""A blocklist entry as a BlocklistEntry object: encoded and decoded back, malformed objects
refused with a reason, and the CRD's schema agreeing with what is written."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
import yaml

from placement.blocklist import BlockEntry, entry_id
from placement.blockobject import MAX_REASON, MAX_TEXT, BlockObjectError, decode, encode, expires_of
from providers.base import BlockBreadth, BlockScope, Tier
from tests.support.fixtures import ROOT

NOW = 1_800_000_000.0


def entry(scope: BlockScope, *, pool: str | None = "train", ttl: float = 300.0) -> BlockEntry:
    return BlockEntry(
        id=entry_id(scope.provider, scope),
        provider=scope.provider,
        scope=scope,
        reason=scope.reason,
        pool=pool,
        recorded_at=datetime.fromtimestamp(NOW, UTC),
        expires_at=datetime.fromtimestamp(NOW + ttl, UTC),
        seconds_left=ttl,
    )


SCOPES = [
    BlockScope("gpu-a", BlockBreadth.OFFERING, tier=Tier.SPOT, accelerator="h100", region="us-east-1", reason="full"),
    BlockScope("gpu-a", BlockBreadth.OFFERING, tier=Tier.ON_DEMAND, reason="cpu only, any region"),
    BlockScope("gpu-a", BlockBreadth.TIER, tier=Tier.SPOT, reason="no spot"),
    BlockScope("gpu-a", BlockBreadth.PROVIDER, reason="quota"),
]


@pytest.mark.parametrize("scope", SCOPES, ids=lambda s: s.breadth.value)
def test_an_entry_survives_the_round_trip_through_its_object(scope: BlockScope) -> None:
    obj = encode(entry(scope), created=NOW)
    assert obj["metadata"]["name"] == entry_id("gpu-a", scope)
    assert obj["spec"]["ttlSeconds"] == 300 and expires_of(obj) == pytest.approx(NOW + 300)
    back = decode(obj, now=NOW + 100)
    assert (back.id, back.scope, back.pool, back.seconds_left) == (entry(scope).id, scope, "train", 200.0)
    assert back.expires_at == entry(scope).expires_at and back.recorded_at == entry(scope).recorded_at


def test_the_id_is_the_scope_folded_and_differs_between_scopes() -> None:
    upper = BlockScope("gpu-a", BlockBreadth.OFFERING, tier=Tier.SPOT, accelerator="H100", region="us-east-1")
    assert entry_id("gpu-a", upper) == entry_id("gpu-a", SCOPES[0])  # the accelerator is folded, the reason ignored
    assert len({entry_id("gpu-a", s) for s in SCOPES}) == len(SCOPES)
    tier_wide = BlockScope("gpu-a", BlockBreadth.TIER, tier=Tier.SPOT, region="ignored")
    assert entry_id("gpu-a", tier_wide) == entry_id("gpu-a", SCOPES[2])  # fields outside the breadth do not count


def test_a_long_reason_is_cut_to_the_bound() -> None:
    scope = BlockScope("gpu-a", BlockBreadth.PROVIDER, reason="x" * 5000)
    obj = encode(entry(scope), created=NOW)
    assert len(obj["spec"]["reason"]) == MAX_REASON
    assert decode(obj, now=NOW).reason == "x" * MAX_REASON


@pytest.mark.parametrize(
    ("change", "complaint"),
    [
        ({"spec": None}, "no spec"),
        ({"provider": None}, "spec.provider"),
        ({"breadth": "galaxy"}, "spec.breadth"),
        ({"tier": "Cheap"}, "spec.tier"),
        ({"expiresAt": "tomorrow"}, "spec.expiresAt"),
        ({"region": "us-west-2"}, "not its scope's id"),
        ({"reason": "y" * (MAX_REASON + 1)}, "spec.reason"),
    ],
)
def test_a_malformed_object_is_refused_with_its_reason(change: dict[str, Any], complaint: str) -> None:
    obj = encode(entry(SCOPES[0]), created=NOW)
    if "spec" in change:
        obj["spec"] = change["spec"]
    else:
        obj["spec"] = {k: v for k, v in obj["spec"].items() if k not in change} | {
            k: v for k, v in change.items() if v is not None
        }
    with pytest.raises(BlockObjectError, match=complaint.replace(".", r"\.")):
        decode(obj, now=NOW)


def test_the_crd_schema_matches_what_is_written() -> None:
    crd = yaml.safe_load((ROOT / "deploy/crds/blocklistentry.yaml").read_text())
    (version,) = crd["spec"]["versions"]
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    fields = spec["properties"]
    assert sorted(fields["breadth"]["enum"]) == sorted(b.value for b in BlockBreadth)
    assert sorted(fields["tier"]["enum"]) == sorted(t.value for t in Tier)
    assert fields["reason"]["maxLength"] == fields["scope"]["maxLength"] == MAX_REASON
    assert all(fields[f]["maxLength"] == MAX_TEXT for f in ("accelerator", "region", "pool"))
    for scope in SCOPES:
        written = encode(entry(scope), created=NOW)["spec"]
        assert set(written) <= set(fields) and set(spec["required"]) <= set(written)
    assert [c["name"] for c in version["additionalPrinterColumns"]] == [
        "Provider",
        "Scope",
        "Reason",
        "TTL",
        "Age",
        "Expires",
        "Pool",
    ]
