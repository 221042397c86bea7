"""The billing record over the devcluster, with the fake cloud (vnode.model.billing): a Pod's
`nebula.io/billing` opens at its instance's fact time and closes when the instance stops, before
the Pod object goes; a restarted Runner reads it back and keeps counting (not rewritten, still
open); a replaced instance gives two spans; the node's `nebula.io/billing-seen-at` is written and,
after a restart, closes the span of an instance that vanished while no manager watched."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from devcluster import DevCluster
from kube import billing, names
from kube.billing import Billing
from kube.client import Kube, path_for
from kube.times import parse_rfc3339
from providers.base import InstanceId
from providers.fake import FakeProvider
from tests.support.factories import make_pod
from tests.support.pods import get_pod, phase_of
from tests.support.polling import wait_for
from vnode.model import billing as model
from vnode.model.runs import BackoffPolicy
from vnode.runner import Runner

HOLD = "test.nebula.io/hold"  # keeps the Pod object after the vnode's final delete, to read its record


def annotations_of(kube: Kube, name: str) -> dict[str, str]:
    return dict(((get_pod(kube, name) or {}).get("metadata") or {}).get("annotations") or {})


def record_of(kube: Kube, name: str) -> Billing:
    return billing.parse(annotations_of(kube, name).get(names.BILLING_ANNOTATION))


def instance_of(kube: Kube, name: str) -> str:
    return annotations_of(kube, name).get(names.INSTANCE_ID_ANNOTATION, "")


def create(kube: Kube, name: str, **fields: Any) -> None:
    kube.create(path_for("pods", namespace="default"), make_pod(name, "gpu", **fields))


def release(kube: Kube, name: str) -> None:
    kube.patch(path_for("pods", namespace="default", name=name), {"metadata": {"finalizers": []}})
    wait_for(lambda: get_pod(kube, name) is None, what=f"{name} gone")


def test_I12_the_billing_record_is_written_from_facts_and_never_reset(
    kube: Kube, start_runner: Callable[..., Runner], cloud_name: str
) -> None:
    """Opened at the instance's created_at (the fake bills from creation), not when the vnode
    looked; read back unchanged and still open by a restarted Runner; closed on delete, at a time
    the instance was billing, before the Pod object goes."""
    provider = FakeProvider("gpu", {"cloud": cloud_name})
    first = start_runner(provider)
    create(kube, "billed", metadata={"finalizers": [HOLD]})
    wait_for(lambda: phase_of(kube, "billed") == "Running", what="billed Running")
    opened = wait_for(lambda: (lambda r: r if r.billing else None)(record_of(kube, "billed")), what="the span open")
    iid = instance_of(kube, "billed")
    facts = provider.get(InstanceId(iid))
    assert facts is not None and opened.instance == iid and opened.closed == ()
    assert opened.open == pytest.approx(facts.created_at.timestamp(), abs=0.001)
    text = annotations_of(kube, "billed")[names.BILLING_ANNOTATION]
    assert first.stop(timeout=5) == []

    second = start_runner(FakeProvider("gpu", {"cloud": cloud_name}))  # a fresh memory
    wait_for(lambda: second.handler.tracks("default", "billed"), what="billed adopted")
    lists = len(provider.cloud.call_log("list"))
    wait_for(lambda: len(provider.cloud.call_log("list")) >= lists + 3, what="three polls of the new Runner")
    assert annotations_of(kube, "billed")[names.BILLING_ANNOTATION] == text  # read back, never reset

    deleted_at = time.time()
    kube.delete(path_for("pods", namespace="default", name="billed"), grace_seconds=2)
    closed = wait_for(lambda: (lambda r: r if r.closed else None)(record_of(kube, "billed")), what="the span closed")
    (span,) = closed.closed
    assert closed.open is None and span.start == opened.open
    assert deleted_at - 1.0 <= span.end <= time.time()  # billing until at least the last poll before
    release(kube, "billed")


def test_a_replaced_instance_gives_two_spans(kube: Kube, start_runner: Callable[..., Runner], cloud_name: str) -> None:
    provider = FakeProvider("gpu", {"cloud": cloud_name, "restarts_in_place": False})
    start_runner(provider, backoff=BackoffPolicy(initial=0.2, maximum=0.4))
    create(kube, "replaced")
    wait_for(lambda: record_of(kube, "replaced").billing, what="the first span open")
    old = instance_of(kube, "replaced")
    provider.cloud.exit(old, code=1)  # restartPolicy Always, no restart in place: a new instance
    record = wait_for(
        lambda: (lambda r: r if r.billing and r.instance not in ("", old) else None)(record_of(kube, "replaced")),
        what="the replacement's span open",
    )
    new = provider.get(InstanceId(record.instance))
    first = provider.get(InstanceId(old))
    assert new is not None and first is not None
    (span,) = record.closed
    assert span.start == pytest.approx(first.created_at.timestamp(), abs=0.001)
    assert span.start < span.end <= record.open  # the old one closed before the new one opened
    assert record.open == pytest.approx(new.created_at.timestamp(), abs=0.001)


def test_billing_seen_at_is_written_and_closes_the_span_of_an_instance_gone_while_no_manager_watched(
    cluster: DevCluster,
    kube: Kube,
    start_runner: Callable[..., Runner],
    cloud_name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(model, "SEEN_EVERY", 0.5)  # the minute, shortened for the test
    provider = FakeProvider("gpu", {"cloud": cloud_name})
    first = start_runner(provider)
    create(kube, "vanished", restartPolicy="Never")
    opened = wait_for(lambda: (lambda r: r if r.billing else None)(record_of(kube, "vanished")), what="the span open")
    start = opened.open
    assert start is not None

    def seen_at() -> float | None:
        node = kube.get(path_for("nodes", name="nebula-gpu"))
        text = ((node.get("metadata") or {}).get("annotations") or {}).get(names.BILLING_SEEN_ANNOTATION)
        return parse_rfc3339(text).timestamp() if text else None

    wait_for(lambda: (seen_at() or 0.0) > start + 0.5, what="billing-seen-at past the span's start")
    assert first.stop(timeout=5) == []
    anchor = seen_at()
    assert anchor is not None and anchor <= time.time()
    provider.cloud.lose(instance_of(kube, "vanished"), vanish=True)  # gone, no end fact

    start_runner(FakeProvider("gpu", {"cloud": cloud_name}))
    closed = wait_for(lambda: (lambda r: r if r.closed else None)(record_of(kube, "vanished")), what="the span closed")
    (span,) = closed.closed
    assert closed.open is None and span.start == opened.open
    assert span.end == pytest.approx(anchor, abs=0.001)  # when every span was last seen billing
    wait_for(lambda: phase_of(kube, "vanished") == "Failed", what="vanished Failed (InstanceLost)")


def test_a_finished_pods_span_left_open_by_a_dead_manager_closes_when_taken_up_with_nothing_to_track(
    cluster: DevCluster,
    kube: Kube,
    start_runner: Callable[..., Runner],
    cloud_name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The manager wrote the Pod's final status and died before writing its closed span; the
    instance is gone when the next one starts (a provider that keeps nothing once terminated).
    The finished Pod has nothing to track, but its span must not count on until it is deleted:
    it closes at the node's billing-seen-at."""
    monkeypatch.setattr(model, "SEEN_EVERY", 0.5)  # the minute, shortened for the test
    provider = FakeProvider("gpu", {"cloud": cloud_name})
    first = start_runner(provider)
    create(kube, "done", restartPolicy="Never")
    opened = wait_for(lambda: (lambda r: r if r.billing else None)(record_of(kube, "done")), what="the span open")
    node = path_for("nodes", name="nebula-gpu")

    def seen_at() -> float | None:
        text = ((kube.get(node).get("metadata") or {}).get("annotations") or {}).get(names.BILLING_SEEN_ANNOTATION)
        return parse_rfc3339(text).timestamp() if text else None

    wait_for(lambda: (seen_at() or 0.0) > (opened.open or 0.0) + 0.5, what="billing-seen-at past the span's start")
    assert first.stop(timeout=5) == []
    anchor = seen_at()
    kube.patch(  # the final status the dead manager did write
        path_for("pods", namespace="default", name="done", subresource="status"),
        {"status": {"phase": "Succeeded", "reason": None, "message": None}},
    )
    assert record_of(kube, "done").open == opened.open  # its close, it did not
    provider.cloud.lose(instance_of(kube, "done"), vanish=True)

    start_runner(FakeProvider("gpu", {"cloud": cloud_name}))
    closed = wait_for(lambda: (lambda r: r if r.closed else None)(record_of(kube, "done")), what="the span closed")
    (span,) = closed.closed
    assert closed.open is None and span.start == opened.open
    assert span.end == pytest.approx(anchor, abs=0.001)
    assert phase_of(kube, "done") == "Succeeded"


def test_where_billing_starts_with_the_workload_the_span_opens_at_its_start(
    kube: Kube, start_runner: Callable[..., Runner], cloud_name: str
) -> None:
    """A cloud that bills from the workload's start (EC2's `running`, Modal): the span opens at
    the instance's started_at, not at its creation."""
    cpu = {"accelerator": None, "gpu_count": 0, "tier": "OnDemand", "region": "us-east-1", "hourly_price": 0.1}
    scenario = {"billing_starts": "Started", "offerings": [{**cpu, "provisioning_delay": 1.0}]}
    provider = FakeProvider("gpu", {"cloud": cloud_name, "scenario": scenario})
    start_runner(provider)
    create(kube, "started")
    opened = wait_for(lambda: (lambda r: r if r.billing else None)(record_of(kube, "started")), what="the span open")
    facts = provider.get(InstanceId(instance_of(kube, "started")))
    assert facts is not None and facts.started_at is not None
    assert facts.started_at.timestamp() >= facts.created_at.timestamp() + 1.0  # a second provisioning, not billed
    assert opened.open == pytest.approx(facts.started_at.timestamp(), abs=0.001)
