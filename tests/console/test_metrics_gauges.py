"""The gauges read from memory at scrape time (`console.gauges`): which Pods count as finished,
what bills, orphans, the spend from placement's prices, providers up, and leadership."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from console import gauges, metrics, runtime
from console.observer import ConsoleObserver
from kube import names
from providers.base import ClaimName, ProvisionRequest
from tests.support.factories import make_pod_spec
from tests.support.rigs.offline import adopt_new_pod, offline_handler
from vnode.model.tracking import Tracked


def tracked(*, desired: str | None = None, phase: str | None = None, deleting: bool = False) -> Tracked:
    meta: dict[str, Any] = {"name": "p", "namespace": "default"}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    pod = {"metadata": meta, "status": {"phase": phase} if phase else {}}
    return Tracked("default", "p", "u", ClaimName("c"), pod, desired_status={"phase": desired} if desired else None)


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        (tracked(desired="Succeeded"), True),
        (tracked(desired="Failed", phase="Running"), True),
        (tracked(phase="Failed"), True),
        (tracked(desired="Running", phase="Succeeded"), False),  # what Nebula reports wins
        (tracked(desired="Running", deleting=True), True),
        (tracked(desired="Pending"), False),
        (tracked(), False),
    ],
)
def test_a_pod_is_finished_when_succeeded_failed_or_being_deleted(entry: Tracked, expected: bool) -> None:
    assert gauges.finished(entry) is expected


@pytest.mark.parametrize(
    ("leader", "handlers", "expected"),
    [
        (True, 0, 1.0),  # the Lease is held, Runners starting
        (True, 2, 1.0),
        (False, 0, 0.0),  # a standby
        (False, 2, 0.0),  # lost it, still stopping
        (None, 2, 1.0),  # --no-leader-election (never asked), or could not ask: it runs
        (None, 0, 0.0),  # not started
    ],
)
def test_leading_is_holding_the_lease_or_running_without_one(
    leader: bool | None, handlers: int, expected: float
) -> None:
    assert gauges.leading(leader, handlers) == expected


def test_billing_counts_orphans_instances_behind_deleted_pods_and_the_priced_spend(
    fake_provider: Callable[..., Any],
) -> None:
    handler = offline_handler(fake_provider("bill"))
    adopt_new_pod(handler, "a", **{names.HOURLY_PRICE_ANNOTATION: "0.42"})
    adopt_new_pod(handler, "b", **{names.HOURLY_PRICE_ANNOTATION: "1.5"})
    adopt_new_pod(handler, "unplaced")  # no NodePool chose it: no price
    adopt_new_pod(handler, "gone", **{names.HOURLY_PRICE_ANNOTATION: "2"})
    gone_entry = handler.tracked("default/gone")
    assert gone_entry is not None
    gone_entry.pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"  # as the API server marks it
    ghost = handler.provider.provision(
        make_pod_spec(namespace="default", name="ghost", uid="g", container="main", image="x"),
        ProvisionRequest(claim=ClaimName("default-ghost-0")),
    )
    handler.inventory.list()
    billing = gauges.billing_of(handler)
    assert (billing.orphans, billing.behind_finished, billing.unpriced) == (1, 1, 1)
    assert billing.spend == pytest.approx(0.42 + 1.5 + 2)  # every billing instance with a price
    handler.provider.terminate(ghost.instance_id)  # the sweep's work: a terminating orphan is no longer one
    handler.inventory.list()
    assert gauges.billing_of(handler).orphans == 0


def scrape() -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """The registry's samples, by name and labels."""
    found: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(generate_latest(metrics.REGISTRY).decode()):
        for sample in family.samples:
            found.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return found


def test_the_gauges_read_memory_at_scrape_time(
    fake_provider: Callable[..., Any], installed_runtime: Callable[..., Any], observer: ConsoleObserver
) -> None:
    handler = offline_handler(fake_provider("scrape"))
    adopt_new_pod(handler, "p", **{names.HOURLY_PRICE_ANNOTATION: "0.5"})
    installed_runtime(handlers=[handler])
    before = scrape()
    assert before["nebula_tracked_pods"][(("provider", "scrape"),)] == 1.0
    assert "nebula_provider_up" not in before  # no list yet: unknown, not down
    assert before["nebula_leader"][()] == 1.0  # Runners run, no Lease asked (--no-leader-election)
    assert () in before["nebula_mirror_lag_seconds"]
    handler.inventory.list()
    observer.leadership(False)
    after = scrape()
    assert after["nebula_provider_up"][(("node", "nebula-scrape"), ("provider", "scrape"))] == 1.0
    assert after["nebula_spend_dollars_per_hour"][(("provider", "scrape"),)] == 0.5
    assert after["nebula_orphan_instances"][(("provider", "scrape"),)] == 0.0
    assert after["nebula_leader"][()] == 0.0


def test_nebula_node_served_names_each_node_this_replica_serves() -> None:
    runtime.set_replica("manager-a-1")
    try:
        runtime.set_served(["nebula-b", "nebula-a"])
        served = scrape()["nebula_node_served"]
        assert served == {
            (("node", "nebula-a"), ("replica", "manager-a-1")): 1.0,
            (("node", "nebula-b"), ("replica", "manager-a-1")): 1.0,
        }
        runtime.set_served([])  # a replica that serves nothing (a standby, or all given back)
        assert "nebula_node_served" not in scrape()
    finally:
        runtime.set_replica("")
        runtime.set_served([])
