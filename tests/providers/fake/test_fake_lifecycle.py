"""A fake instance's life as FakeProvider reports it, in-process and over HTTP alike, with
an injected clock: restart in place with the previous run's output, retention after
terminate, a new instance for a claim whose old one is going, and the billing flags."""

from __future__ import annotations

import pytest

from providers import errors
from providers.base import ClaimName, InstanceId, InstanceState, LogOptions, LogStream, ProvisionRequest, Restarter
from providers.fake import FakeProvider
from tests.support.factories import make_pod_spec
from tests.support.polling import read_to_end
from tests.support.rigs.fakecloud import START, Rigs

NUMBERED = {"log": {"interval": 1}}  # "fake instance <id> line <n>", one a second from the start


def start(provider: FakeProvider, claim: str = "claim-1") -> InstanceId:
    return provider.provision(make_pod_spec(), ProvisionRequest(claim=ClaimName(claim))).instance_id


def read_all(stream: LogStream, timeout: float = 10.0) -> str:
    return read_to_end(stream, timeout).decode()


def lines(instance_id: str, numbers: range) -> list[str]:
    return [f"fake instance {instance_id} line {n}" for n in numbers]


def test_restart_runs_the_ended_workload_again_and_keeps_the_previous_runs_output(rig: Rigs) -> None:
    setup = rig({**NUMBERED, "workload": {"run_seconds": 5, "exit_code": 3}})
    provider, clock = setup.provider, setup.clock
    instance_id = start(provider)
    clock.advance(1)
    with pytest.raises(errors.InvalidRequest):
        provider.restart(instance_id)  # still running
    with pytest.raises(errors.NotFound):
        provider.logs(instance_id, LogOptions(previous=True))  # one run so far
    clock.advance(5)  # the run ended at +5 with code 3, printing lines 1..6
    provider.restart(instance_id)
    again = provider.get(instance_id)
    assert again is not None and (again.state, again.runs, again.exit_code, again.exit_reason) == (
        InstanceState.RUNNING,
        2,
        None,
        "",
    )
    assert again.started_at is not None and again.started_at.timestamp() == START + 6 and again.finished_at is None
    assert provider.list() == [again]
    clock.advance(2)
    assert read_all(provider.logs(instance_id, LogOptions())).splitlines() == lines(instance_id, range(1, 4))
    previous = read_all(provider.logs(instance_id, LogOptions(previous=True, follow=True, timestamps=True)))
    assert [line.split(" ", 1)[1] for line in previous.splitlines()] == lines(instance_id, range(1, 7))
    assert previous.startswith("2023-11-14T22:13:20.000000000Z ")  # the previous run's own times
    clock.advance(3)  # the scenario's run length applies to the new run too
    ended = provider.get(instance_id)
    assert ended is not None and (ended.state, ended.exit_code, ended.runs) == (InstanceState.FAILED, 3, 2)
    assert ended.finished_at is not None and ended.finished_at.timestamp() == START + 11


def test_restart_of_a_succeeded_workload_and_of_a_gone_or_terminated_instance(rig: Rigs) -> None:
    setup = rig(NUMBERED)
    provider = setup.provider
    instance_id = start(provider)
    setup.cloud.exit(instance_id, code=0)
    provider.restart(instance_id)
    restarted = provider.get(instance_id)
    assert restarted is not None and (restarted.state, restarted.runs) == (InstanceState.RUNNING, 2)
    provider.terminate(instance_id)
    with pytest.raises(errors.NotFound):
        provider.restart(instance_id)
    with pytest.raises(errors.NotFound):
        provider.restart(InstanceId("fake-404"))
    assert len(setup.cloud.call_log("restart")) == 3


def test_restarts_in_place_turned_off_is_not_supported_and_the_capabilities_say_so(rig: Rigs) -> None:
    setup = rig(NUMBERED, restarts_in_place=False)
    provider = setup.provider
    instance_id = start(provider)
    setup.cloud.exit(instance_id, code=1)
    assert isinstance(provider, Restarter) and not provider.capabilities().restarts_in_place
    with pytest.raises(errors.NotSupported):
        provider.restart(instance_id)
    assert setup.cloud.call_log("restart") == []
    caps = rig(NUMBERED).provider.capabilities()
    assert caps.restarts_in_place and caps.bills_after_exit and caps.keeps_output_after_terminate


def test_a_terminated_instance_stays_listed_with_its_output_for_the_retention_then_is_gone(
    rig: Rigs,
) -> None:
    setup = rig({"log": {"lines": ["one", "two", "three"], "interval": 0}, "retention_seconds": 60})
    provider, clock = setup.provider, setup.clock
    instance_id = start(provider)
    clock.advance(10)
    provider.terminate(instance_id)
    clock.advance(59.9)
    [listed] = provider.list()
    assert (listed.id, listed.state) == (instance_id, InstanceState.TERMINATED)
    assert listed.finished_at is not None and listed.finished_at.timestamp() == START + 10
    assert provider.get(instance_id) == listed
    assert read_all(provider.logs(instance_id, LogOptions(follow=True))) == "one\ntwo\nthree\n"
    provider.terminate(instance_id)
    clock.advance(0.1)
    assert provider.get(instance_id) is None and provider.list() == []
    with pytest.raises(errors.NotFound):
        provider.logs(instance_id, LogOptions())


def test_provision_of_a_claim_whose_instance_is_terminated_creates_a_new_instance(rig: Rigs) -> None:
    setup = rig({**NUMBERED, "termination_delay": 30})
    provider = setup.provider
    first = provider.provision(make_pod_spec(), ProvisionRequest(claim=ClaimName("c")))
    provider.terminate(first.instance_id)
    terminating = provider.provision(make_pod_spec(), ProvisionRequest(claim=ClaimName("c")))
    assert terminating.instance_id != first.instance_id and terminating.credential is not None
    assert provider.provision(make_pod_spec(), ProvisionRequest(claim=ClaimName("c"))).instance_id == (
        terminating.instance_id
    )
    setup.clock.advance(30)
    provider.terminate(terminating.instance_id)
    setup.clock.advance(30)
    third = provider.provision(make_pod_spec(), ProvisionRequest(claim=ClaimName("c"))).instance_id
    states = {i.id: i.state for i in provider.list()}
    assert states == {
        first.instance_id: InstanceState.TERMINATED,
        terminating.instance_id: InstanceState.TERMINATED,
        third: InstanceState.RUNNING,
    }


def test_an_exit_control_call_by_claim_reaches_the_live_instance_not_the_terminated_one(
    rig: Rigs,
) -> None:
    setup = rig(NUMBERED)
    provider = setup.provider
    old = start(provider, "c")
    provider.terminate(old)
    new = start(provider, "c")
    assert setup.cloud.exit(claim="c", code=0)["instance"] == new
    states = {i.id: i.state for i in provider.list()}
    assert states == {old: InstanceState.TERMINATED, new: InstanceState.SUCCEEDED}
