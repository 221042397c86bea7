"""A NodePool's `spec.interruption` and `spec.failover.waitForCapacity`: parsed with messages
naming the field and the fix; the interrupted block's TTL (the pool's `interruption.blocklistTTL`,
10m by default) chosen by the blocklist; `replaces_on_rebalance` served by the pool cache as a
`vnode.poolpolicy.PoolPolicies`; and which interrupted Pods placement deletes for their owner."""

from __future__ import annotations

from typing import Any

import pytest

from kube import names
from placement.blocklist import Blocklist
from placement.interruptspec import Interruption
from placement.poolcache import PoolCache
from placement.pools import PoolError, parse_pool
from placement.request import is_replaceable_failure
from providers.base import BlockBreadth, BlockScope, Tier
from tests.support.clock import ManualClock
from tests.support.factories import make_pod
from vnode.poolpolicy import PoolPolicies


def pool(name: str = "p", **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "generation": 1}, "spec": {"providers": [{"name": "gpu-a"}], **spec}}


@pytest.mark.parametrize(
    ("spec", "interruption", "wait"),
    [
        ({}, Interruption(600.0, None, 3600.0, False), None),
        ({"interruption": {}}, Interruption(), None),
        ({"interruption": {"blocklistTTL": "10m", "window": "1h", "proactive": False}}, Interruption(), None),
        ({"interruption": {"fallbackToOnDemandAfter": 2, "window": "30m", "blocklistTTL": "2m", "proactive": True}},
         Interruption(120.0, 2, 1800.0, True), None),
        ({"interruption": {"window": "168h"}}, Interruption(window=604_800.0), None),
        ({"failover": {"waitForCapacity": "2h"}}, Interruption(), 7200.0),
        ({"failover": {"blocklistTTL": "5m", "waitForCapacity": "1m"}}, Interruption(), 60.0),
    ],
)  # fmt: skip
def test_interruption_and_wait_for_capacity_parse(
    spec: dict[str, Any], interruption: Interruption, wait: float | None
) -> None:
    parsed = parse_pool(pool(**spec))
    assert parsed.interruption == interruption
    assert parsed.wait_for_capacity == wait


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"interruption": "often"}, "spec.interruption: must be an object such as {fallbackToOnDemandAfter: 2"),
        ({"interruption": {"after": 2}}, "spec.interruption: unknown fields ['after']; allowed: blocklistTTL, "
         "fallbackToOnDemandAfter, window, proactive"),
        ({"interruption": {"fallbackToOnDemandAfter": 0}}, "spec.interruption.fallbackToOnDemandAfter: 0 is not a "
         "whole number >= 1, e.g. 2; leave it out to never fall back"),
        ({"interruption": {"fallbackToOnDemandAfter": "2"}}, "spec.interruption.fallbackToOnDemandAfter: '2' is not"),
        ({"interruption": {"fallbackToOnDemandAfter": True}}, "spec.interruption.fallbackToOnDemandAfter: True is"),
        ({"interruption": {"proactive": "yes"}}, "spec.interruption.proactive: 'yes' is not true or false"),
        ({"interruption": {"blocklistTTL": "soon"}},
         "spec.interruption.blocklistTTL: 'soon' is not a duration such as 30s, 5m or 1h30m"),
        ({"interruption": {"blocklistTTL": "25h"}},
         "spec.interruption.blocklistTTL: '25h' is out of range; use between 1s and 24h"),
        ({"interruption": {"window": "30s"}},
         "spec.interruption.window: '30s' is out of range; use between 1m and 168h"),
        ({"interruption": {"window": "169h"}}, "spec.interruption.window: '169h' is out of range"),
        ({"failover": {"waitForCapacity": "forever"}},
         "spec.failover.waitForCapacity: 'forever' is not a duration such as 30s, 5m or 1h30m"),
        ({"failover": {"waitForCapacity": "10s"}},
         "spec.failover.waitForCapacity: '10s' is out of range; use between 1m and 168h"),
        ({"failover": {"waitForCapacty": "2h"}},
         "spec.failover: unknown fields ['waitForCapacty']; allowed: blocklistTTL, waitForCapacity"),
    ],
)  # fmt: skip
def test_a_bad_interruption_or_wait_names_the_field_and_the_fix(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(PoolError) as raised:
        parse_pool(pool(**spec))
    assert str(raised.value).startswith(message), str(raised.value)


def cache_of(*objs: dict[str, Any]) -> PoolCache:
    """A pool cache holding `objs` as its listed NodePools (no API server needed to read them)."""
    cache = PoolCache(None, None, policy_sync_wait=0.0)  # type: ignore[arg-type]
    for obj in objs:
        cache._changed(obj["metadata"]["name"], obj)  # as its reflector hands a listed NodePool
    cache.synced.set()
    return cache


def test_an_interrupted_block_lasts_the_pools_interruption_ttl_and_ten_minutes_without_one() -> None:
    clock = ManualClock(1_000.0)
    cache = cache_of(pool("fast", interruption={"blocklistTTL": "2m"}, failover={"blocklistTTL": "30s"}), pool("plain"))
    blocklist = Blocklist(clock=clock, uniform=lambda: 0.0)
    blocklist.use_pool_ttls(cache.ttl_of, cache.interrupted_ttl_of)

    def lasts(provider: str, pool_name: str | None, interrupted: bool) -> float:
        scope = BlockScope(provider, BlockBreadth.OFFERING, tier=Tier.SPOT, accelerator="h100", region="us-east-1")
        blocklist.record(provider, scope, pool=pool_name, interrupted=interrupted)
        (entry,) = [e for e in blocklist.entries() if e.provider == provider]
        return entry.expires_at.timestamp() - clock.now

    assert lasts("a", "fast", interrupted=True) == 120.0  # spec.interruption.blocklistTTL
    assert lasts("b", "fast", interrupted=False) == 30.0  # a refusal keeps spec.failover.blocklistTTL
    assert lasts("c", "plain", interrupted=True) == 600.0  # the default 10m
    assert lasts("d", None, interrupted=True) == 600.0  # a Pod in no pool
    assert lasts("e", "gone", interrupted=True) == 600.0  # an unknown pool
    assert lasts("f", None, interrupted=False) == 300.0  # the blocklist's default, as before


def test_the_pool_cache_says_which_pools_replace_on_rebalance() -> None:
    cache = cache_of(pool("eager", interruption={"proactive": True}), pool("calm"), pool("broken", strategy="Cheap"))
    policies: PoolPolicies = cache
    assert policies.replaces_on_rebalance("eager") is True
    assert policies.replaces_on_rebalance("calm") is False
    assert policies.replaces_on_rebalance("broken") is False  # invalid: nothing is known of it
    assert policies.replaces_on_rebalance("missing") is False
    assert policies.replaces_on_rebalance(None) is False


def failed(reason: str, kind: str, api_version: str) -> dict[str, Any]:
    refs = [{"apiVersion": api_version, "kind": kind, "name": "o", "uid": "o-1", "controller": True}] if kind else []
    return make_pod(
        "p",
        labels={names.ENABLED_LABEL: "true"},
        metadata={"ownerReferences": refs},
        status={"phase": "Failed", "reason": reason},
    )


@pytest.mark.parametrize("reason", sorted(names.INTERRUPTED_REASONS))
def test_an_interrupted_pod_is_replaced_as_preempted_is_and_a_jobs_pod_is_kept(reason: str) -> None:
    assert is_replaceable_failure(failed(reason, "ReplicaSet", "apps/v1"))  # deleted: the ReplicaSet makes a new one
    assert not is_replaceable_failure(failed(reason, "", ""))  # a bare Pod stays Failed as the record
    # A Job replaces a Failed Pod itself; its podFailurePolicy (DisruptionTarget: Ignore) reads the Failed Pod.
    assert not is_replaceable_failure(failed(reason, "Job", "batch/v1"))
