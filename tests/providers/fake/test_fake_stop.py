"""`stop_container` on the fake cloud, in-process and over HTTP (the grace travels on the
wire), on an injected clock: a scripted SIGTERM reaction (dies at once: 143; traps it, works,
exits with its code; ignores it: 137 at the grace's end), grace 0, and a shorter second grace."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from providers.base import ClaimName, InstanceId, InstanceState, ProvisionRequest
from providers.fake.scenario import SigtermScript, load_scenario
from providers.shape import ContainerFacts, ContainerSpec, ContainerState
from tests.support.factories import make_pod_spec
from tests.support.rigs.fakecloud import START, Rig, Rigs

R, T = ContainerState.RUNNING, ContainerState.TERMINATED
SCRIPTS: dict[str, Any] = {
    "trapper": {"sigterm": {"seconds": 2, "exit_code": 143}},
    "saver": {"sigterm": {"seconds": 3, "exit_code": 0}},
    "stubborn": {"sigterm": "ignore"},
    "plain": {},
}
SCENARIO: dict[str, Any] = {"workload": {"init_seconds": 0, "containers": SCRIPTS}}


def at(seconds: float) -> datetime:
    return datetime.fromtimestamp(START + seconds, UTC)


def started(rig: Rigs, scenario: dict[str, Any] = SCENARIO) -> tuple[Rig, InstanceId]:
    """An instance running every scripted container, 1 s after it started."""
    r = rig(scenario)
    names = tuple(SCRIPTS)
    spec = make_pod_spec(container=names[0], containers=tuple(ContainerSpec(n) for n in names))
    instance_id = r.provider.provision(spec, ProvisionRequest(claim=ClaimName("claim-1"))).instance_id
    r.clock.advance(1)
    assert {name: state for name, (state, _) in r.states(instance_id).items()} == dict.fromkeys(names, R)
    return r, instance_id


def ended(r: Rig, instance_id: InstanceId, name: str) -> tuple[ContainerState, int | None, datetime | None, str]:
    facts: ContainerFacts = r.facts(instance_id)[name]
    return facts.state, facts.exit_code, facts.finished_at, facts.exit_reason


def test_a_container_that_traps_sigterm_works_then_exits_with_its_own_code(rig: Rigs) -> None:
    r, instance_id = started(rig)
    r.provider.stop_container(instance_id, "trapper", grace=10)
    r.provider.stop_container(instance_id, "saver", grace=10)
    r.clock.advance(1.9)
    assert r.states(instance_id)["trapper"][0] is R  # still at its work
    r.clock.advance(0.1)
    assert ended(r, instance_id, "trapper") == (T, 143, at(3), "Error")
    r.clock.advance(1)
    assert ended(r, instance_id, "saver") == (T, 0, at(4), "Completed")
    assert r.states(instance_id)["plain"][0] is R  # the others run on


def test_a_container_without_a_handler_dies_of_sigterm_at_once_with_143(rig: Rigs) -> None:
    r, instance_id = started(rig)
    r.provider.stop_container(instance_id, "plain", grace=30)
    assert ended(r, instance_id, "plain") == (T, 143, at(1), "Error")


def test_a_container_that_ignores_sigterm_is_killed_with_137_when_the_grace_ends(rig: Rigs) -> None:
    r, instance_id = started(rig)
    r.provider.stop_container(instance_id, "stubborn", grace=3)
    r.clock.advance(2.9)
    assert r.states(instance_id)["stubborn"][0] is R
    r.clock.advance(0.1)
    assert ended(r, instance_id, "stubborn") == (T, 137, at(4), "Error")


def test_work_longer_than_the_grace_is_cut_by_sigkill(rig: Rigs) -> None:
    r, instance_id = started(rig)
    r.provider.stop_container(instance_id, "trapper", grace=1)
    r.clock.advance(5)
    assert ended(r, instance_id, "trapper")[:3] == (T, 137, at(2))


def test_grace_zero_kills_at_once_without_sigterm(rig: Rigs) -> None:
    r, instance_id = started(rig)
    r.provider.stop_container(instance_id, "trapper", grace=0)
    assert ended(r, instance_id, "trapper")[:3] == (T, 137, at(1))


def test_a_shorter_second_grace_shortens_the_wait_and_a_longer_one_never_lengthens_it(rig: Rigs) -> None:
    r, instance_id = started(rig)
    r.provider.stop_container(instance_id, "stubborn", grace=30)
    r.clock.advance(1)
    r.provider.stop_container(instance_id, "stubborn", grace=2)  # a force delete after a graceful one
    r.provider.stop_container(instance_id, "stubborn", grace=60)
    r.clock.advance(1.9)
    assert r.states(instance_id)["stubborn"][0] is R
    r.clock.advance(0.1)
    assert ended(r, instance_id, "stubborn")[:3] == (T, 137, at(4))
    r.provider.stop_container(instance_id, "stubborn", grace=0)  # not running: success
    assert ended(r, instance_id, "stubborn")[:3] == (T, 137, at(4))


def test_the_workload_sigterm_script_serves_a_one_container_instance(rig: Rigs) -> None:
    r = rig({"workload": {"sigterm": {"seconds": 15, "exit_code": 143}}})
    spec = make_pod_spec(container="main")
    instance_id = r.provider.provision(spec, ProvisionRequest(claim=ClaimName("claim-1"))).instance_id
    r.clock.advance(1)
    r.provider.stop_container(instance_id, "", grace=60)
    r.clock.advance(14)
    assert r.get(instance_id).state is InstanceState.RUNNING
    r.clock.advance(1)
    instance = r.get(instance_id)
    assert (instance.state, instance.exit_code, instance.exit_reason) == (InstanceState.FAILED, 143, "Error")
    r.provider.terminate(instance_id)  # no grace of its own: it ended
    assert r.get(instance_id).state is InstanceState.TERMINATED


def test_the_sigterm_script_is_parsed_and_checked() -> None:
    parsed = load_scenario(SCENARIO)
    assert parsed.containers["trapper"].sigterm == SigtermScript(2.0, 143)
    assert parsed.containers["stubborn"].sigterm == SigtermScript(None, 143)
    assert parsed.containers["plain"].sigterm == SigtermScript(0.0, 143)
    assert load_scenario({"workload": {"sigterm": {"seconds": 4}}}).sigterm == SigtermScript(4.0, 143)
    for bad in ("later", {"seconds": -1}, {"second": 2}):
        with pytest.raises(ValueError, match="sigterm"):
            load_scenario({"workload": {"sigterm": bad}})
