"""The fake cloud's `interrupt` fault with a notice window, through `FakeProvider`'s
NoticeSource (in-process and over HTTP): a notice delivered, delivered again until acked,
the instance taken at the deadline, 50 of 200 chosen by count and tier, an instance
terminated before its deadline not taken again, an outage, a scenario whose wire says
nothing ahead, the bounded long poll, the state file and the shell verb."""

from __future__ import annotations

import argparse
import io
import json
import threading
import time
from datetime import UTC, datetime
from typing import Any

import pytest

from providers import errors
from providers.base import (
    ClaimName,
    InstanceId,
    InstanceState,
    Notice,
    NoticeKind,
    NoticeSource,
    ProvisionRequest,
    Tier,
)
from providers.fake import FakeProvider, interrupts
from providers.fake import command as fakecloud
from providers.fake.cloud import FakeCloud
from providers.fake.faults import Action, parse_fault
from providers.fake.scenario import load_scenario
from providers.fake.server import start_server
from providers.owner import Owner
from tests.support.factories import make_pod_spec
from tests.support.polling import wait_for
from tests.support.rigs.fakecloud import START, Rig, Rigs

SCENARIO: dict[str, Any] = {
    "offerings": [
        {"accelerator": "h100", "gpu_count": 1, "tiers": ["Spot", "OnDemand"], "region": "us-east-1"},
    ],
}


def at(seconds: float) -> datetime:
    return datetime.fromtimestamp(START + seconds, UTC)


def provision(on: Rig | FakeProvider, claim: str, tier: Tier = Tier.SPOT) -> InstanceId:
    request = ProvisionRequest(claim=ClaimName(claim), capacity_type=tier)
    provider = on.provider if isinstance(on, Rig) else on
    return provider.provision(make_pod_spec(accelerator="h100", gpu_count=1), request).instance_id


def test_a_notice_is_delivered_with_its_kind_and_deadline(rig: Rigs) -> None:
    r = rig(SCENARIO)
    instance_id = provision(r, "a")
    assert isinstance(r.provider, NoticeSource)
    assert r.provider.notices(0) == []
    done = r.cloud.interrupt(instance_id, notice=90)
    assert done["instances"] == [instance_id] and len(done["notices"]) == 1
    (notice,) = r.provider.notices(0)
    assert notice.id == done["notices"][0] and notice.receipt == notice.id
    assert (notice.instance_id, notice.kind) == (instance_id, NoticeKind.SPOT_INTERRUPTION)
    assert (notice.issued_at, notice.deadline) == (at(0), at(90))
    assert instance_id in notice.detail and notice.takes_capacity


def test_an_unacked_notice_comes_again_after_the_redelivery_time_and_never_after_its_ack(rig: Rigs) -> None:
    r = rig({**SCENARIO, "notice_redelivery": 10})
    instance_id = provision(r, "a")
    r.cloud.interrupt(instance_id)
    (first,) = r.provider.notices(0)
    assert r.provider.notices(0) == []  # hidden while the vnode handles it
    r.clock.advance(11)
    (again,) = r.provider.notices(0)
    assert again.id == first.id
    r.provider.ack(again)
    r.provider.ack(again)  # idempotent
    r.clock.advance(11)
    assert r.provider.notices(0) == []
    assert r.get(instance_id).state is InstanceState.RUNNING  # an ack takes nothing; the deadline does


def test_the_deadline_takes_the_instance_as_a_spot_reclaim_and_a_rebalance_takes_none(rig: Rigs) -> None:
    r = rig(SCENARIO)
    taken, warned = provision(r, "a"), provision(r, "b")
    r.cloud.interrupt(taken, notice=120)
    r.cloud.interrupt(warned, notice=120, notice_kind="RebalanceRecommendation")
    rebalance = next(n for n in r.provider.notices(0) if n.instance_id == warned)
    assert rebalance.kind is NoticeKind.REBALANCE and rebalance.deadline is None and not rebalance.takes_capacity
    r.clock.advance(119)
    assert r.get(taken).state is InstanceState.RUNNING
    r.clock.advance(2)
    gone = r.get(taken)
    assert (gone.state, gone.preempted, gone.finished_at) == (InstanceState.TERMINATED, True, at(120))
    assert gone.message.startswith("interrupted")
    assert r.get(warned).state is InstanceState.RUNNING and not r.get(warned).preempted


def test_count_and_tier_pick_50_of_200_oldest_first_and_a_batch_carries_at_most_100(rig: Rigs) -> None:
    r = rig(SCENARIO)
    ids = [provision(r, f"c{i}", Tier.SPOT if i % 2 == 0 else Tier.ON_DEMAND) for i in range(200)]
    spot = [i for n, i in enumerate(ids) if n % 2 == 0]
    done = r.cloud.interrupt(count=50, tier="Spot", notice=60)
    assert done["instances"] == spot[:50]
    notices = r.provider.notices(0)
    assert [n.instance_id for n in notices] == spot[:50]
    for notice in notices:
        r.provider.ack(notice)
    r.clock.advance(61)
    listed = {i.id: i for i in r.provider.list()}
    assert {i for i, seen in listed.items() if seen.preempted} == set(spot[:50])
    assert sum(seen.state is InstanceState.RUNNING for seen in listed.values()) == 150
    first = r.cloud.interrupt(count=100, notice=60)["instances"]  # of the 150 live ones, the 100 oldest
    again = r.cloud.interrupt(count=100, notice=60)["instances"]  # not those again: the 50 left
    assert not set(first) & set(again) and len(again) == 50
    assert len(r.provider.notices(0)) == 100 and len(r.provider.notices(0)) == 50


def test_an_instance_terminated_before_its_deadline_is_not_taken_again(rig: Rigs) -> None:
    r = rig(SCENARIO)
    instance_id = provision(r, "a")
    r.cloud.interrupt(instance_id, notice=30)
    (notice,) = r.provider.notices(0)
    r.provider.terminate(instance_id)  # the vnode stopped it gracefully inside the notice
    r.provider.ack(notice)
    r.clock.advance(31)
    ended = r.get(instance_id)
    assert (ended.state, ended.preempted, ended.message) == (InstanceState.TERMINATED, False, "terminated on request")
    with pytest.raises(errors.NotFound, match="no live instance"):
        r.cloud.interrupt(instance_id)


def test_an_outage_makes_notices_and_ack_unavailable_and_nothing_is_lost(rig: Rigs) -> None:
    r = rig(SCENARIO)
    instance_id = provision(r, "a")
    r.cloud.interrupt(instance_id)
    r.cloud.outage()
    with pytest.raises(errors.Unavailable):
        r.provider.notices(0)
    stand_in = Notice("n-1", instance_id, NoticeKind.SPOT_INTERRUPTION, at(0), receipt="n-1")
    with pytest.raises(errors.Unavailable):
        r.provider.ack(stand_in)
    r.cloud.clear()
    assert [n.id for n in r.provider.notices(0)] == ["n-1"]


def test_a_cloud_whose_wire_says_nothing_ahead_still_takes_the_instance_at_the_deadline(rig: Rigs) -> None:
    r = rig({**SCENARIO, "notices": False})
    instance_id = provision(r, "a")
    r.cloud.interrupt(instance_id, notice=5)
    assert r.provider.notices(0) == []
    r.clock.advance(6)
    assert r.provider.notices(0) == []
    seen = r.get(instance_id)
    assert (seen.state, seen.preempted) == (InstanceState.TERMINATED, True)


def test_each_owner_hears_only_of_its_own_instances(rig: Rigs) -> None:
    r = rig(SCENARIO)
    where = {"url": r.provider.client.url} if r.provider.client else {"cloud": r.provider._cloud_name}
    other = FakeProvider("gpu", where, owner=Owner.standalone("other"))
    mine, theirs = provision(r, "a"), provision(other, "b")
    r.cloud.interrupt(mine)
    r.cloud.interrupt(theirs)
    (notice,) = r.provider.notices(0)
    assert notice.instance_id == mine
    other.ack(notice)  # another owner's ack does nothing
    r.clock.advance(31)
    assert [n.instance_id for n in r.provider.notices(0)] == [mine]
    assert [n.instance_id for n in other.notices(0)] == [theirs]


def test_a_long_poll_returns_when_a_notice_is_issued_and_is_bounded_by_the_cloud(
    rig: Rigs, monkeypatch: pytest.MonkeyPatch
) -> None:
    r = rig(SCENARIO)
    instance_id = provision(r, "a")
    got: list[list[Notice]] = []
    poll = threading.Thread(target=lambda: got.append(list(r.provider.notices(20))), daemon=True)
    began = time.monotonic()
    poll.start()
    r.cloud.interrupt(instance_id)
    wait_for(lambda: got, timeout=20, what="the long poll's answer")
    assert [n.instance_id for n in got[0]] == [instance_id] and time.monotonic() - began < 20
    poll.join()
    monkeypatch.setattr(interrupts, "MAX_WAIT", 0.2)  # what the cloud allows, whatever is asked
    began = time.monotonic()
    assert r.provider.notices(3600) == [] and time.monotonic() - began < 60


def test_the_notices_route_speaks_json_and_held_notices_outlive_the_service(tmp_path: Any) -> None:
    state = tmp_path / "state.json"
    server = start_server(scenario=SCENARIO, state_path=state)
    provider = FakeProvider("gpu", {"url": server.url})
    instance_id = provision(provider, "a")
    out = control("inject", "--url", server.url, "interrupt", "--count", "1", "--tier", "Spot", "--notice", "60")
    assert json.loads(out) == {"kind": "interrupt", "instances": [instance_id], "notices": ["n-1"], "applied": True}
    server.close()
    server = start_server(scenario=SCENARIO, state_path=state)
    try:
        provider = FakeProvider("gpu", {"url": server.url})
        client = provider.client
        assert client is not None
        raw = client._call("GET", f"/v1/notices?owner={provider.owner.key}&wait=0")
        assert set(raw["notices"][0]) == {"id", "instance_id", "kind", "issued_at", "deadline", "detail", "receipt"}
        assert raw["notices"][0]["kind"] == "SpotInterruption"
        assert client._call("POST", f"/v1/notices/n-1/ack?owner={provider.owner.key}", {}) == {}
    finally:
        server.close()


def test_the_interrupt_fault_is_parsed_and_checked() -> None:
    fault = parse_fault({"kind": "interrupt", "count": 3, "tier": "spot"}, fault_id="f-1", now=0.0)
    assert isinstance(fault, Action)
    assert (fault.kind, fault.count, fault.tier, fault.notice) == ("interrupt", 3, Tier.SPOT, 120.0)
    for bad in (
        {"kind": "interrupt"},
        {"kind": "interrupt", "instance": "fake-1", "count": 2},
        {"kind": "interrupt", "instance": "fake-1", "tier": "Spot"},
        {"kind": "interrupt", "instance": "fake-1", "notice_kind": "Meteor"},
        {"kind": "interrupt", "instance": "fake-1", "notice": -1},
        {"kind": "interrupt", "count": 0},
    ):
        with pytest.raises(ValueError):
            parse_fault(bad, fault_id="f-1", now=0.0)
    with pytest.raises(ValueError, match="'notices' is true or false"):
        load_scenario({"notices": "no"})


def test_a_malformed_notices_entry_in_a_state_file_is_refused() -> None:
    cloud = FakeCloud(load_scenario(SCENARIO))
    state = cloud.snapshot()
    with pytest.raises(ValueError, match="malformed notices"):
        cloud.restore({**state, "notices": {"held": [{"id": "n-1"}]}})
    cloud.restore({k: v for k, v in state.items() if k != "notices"})  # a file from before interrupts
    assert cloud.snapshot()["notices"] == {"counter": 0, "held": [], "deadlines": []}


def test_at_most_max_notices_are_held(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(interrupts, "MAX_NOTICES", 3)
    cloud = FakeCloud(load_scenario(SCENARIO))
    provider_owner = Owner.standalone("gpu").key
    for n in range(4):
        request = ProvisionRequest(claim=ClaimName(f"c{n}"), capacity_type=Tier.SPOT)
        cloud.provision(make_pod_spec(accelerator="h100", gpu_count=1), request, owner=provider_owner)
    with pytest.raises(ValueError, match="at most 3 notices"):
        cloud.interrupt(count=4)
    assert cloud.notices(owner=provider_owner, wait=0) == []


def control(*argv: str) -> str:
    parser = argparse.ArgumentParser()
    fakecloud.add_arguments(parser)
    out = io.StringIO()
    fakecloud.run_fakecloud(vars(parser.parse_args(argv)), out)
    return out.getvalue()
