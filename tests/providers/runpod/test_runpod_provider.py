"""`RunPodProvider` against the fake RunPod through real HTTP and real SSH: a Pod's lifecycle
(PROVISIONING while queued, INITIALIZING, RUNNING, the exit code), adoption by a restarted
provider, owner isolation, spot bids and interruptions, offerings and regions."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from providers import errors
from providers.base import InstanceState, NoticeSource, PodSpec, ProvisionRequest, Tier
from providers.claim import claim_name
from providers.egress import Egress, EgressMode, allowlist
from providers.owner import Owner
from providers.runpod import RunPodProvider
from tests.providers.runpod.fake_runpod import FakeRunPod
from tests.support.polling import wait_for


def make(fake: FakeRunPod, tmp_path: Path, owner: Owner | None = None, **options: object) -> RunPodProvider:
    creds = tmp_path / "creds"
    creds.mkdir(exist_ok=True)
    (creds / "RUNPOD_API_KEY").write_text(fake.api_key + "\n")
    settings = {"api_base_url": fake.url, "credentials_dir": str(creds), **options}
    return RunPodProvider("runpod", settings, owner=owner)


def pod_of(script: str, **fields: object) -> PodSpec:
    values: dict[str, object] = {"namespace": "default", "name": "w", "uid": str(uuid.uuid4()), "container": "main",
                                 "image": "busybox", "command": ("sh", "-c", script)}  # fmt: skip
    values.update(fields)
    return PodSpec(**values)  # type: ignore[arg-type]


def request_of(pod: PodSpec, **fields: object) -> ProvisionRequest:
    return ProvisionRequest(claim=claim_name(pod.namespace, pod.name, pod.uid), **fields)  # type: ignore[arg-type]


def state(provider: RunPodProvider, instance_id: str) -> InstanceState | None:
    found = provider.get(instance_id)  # type: ignore[arg-type]
    return found.state if found else None


def test_a_pod_runs_and_its_exit_code_is_read_over_ssh(fake: FakeRunPod, tmp_path: Path) -> None:
    provider = make(fake, tmp_path)
    pod = pod_of("echo hello; sleep 1; exit 3", ports=(8080,))
    result = provider.provision(pod, request_of(pod))
    assert result.credential is not None and b"OPENSSH PRIVATE KEY" in result.credential.data["ssh-privatekey"]
    assert result.endpoint == f"https://{result.instance_id}-8080.proxy.runpod.net"
    wait_for(lambda: state(provider, result.instance_id) is InstanceState.FAILED, 30, what="the exit code")
    found = provider.get(result.instance_id)
    assert found is not None and found.exit_code == 3 and found.exit_reason == "Error"
    assert found.started_at is not None and found.finished_at is not None
    listed = {i.id: i for i in make(fake, tmp_path).list()}  # a restarted manager reads it again over SSH
    assert listed[result.instance_id].state is InstanceState.FAILED and listed[result.instance_id].exit_code == 3
    (view,) = fake.pods()
    assert "NEBULA_CLAIM" in view.env_keys and "PUBLIC_KEY" in view.env_keys
    assert view.name.startswith("nebula-") and view.name.endswith(request_of(pod).claim)


def test_a_queued_pod_is_provisioning_then_running_then_succeeded(fake: FakeRunPod, tmp_path: Path) -> None:
    provider = make(fake, tmp_path)
    fake.queue(True)
    pod = pod_of("sleep 2")
    result = provider.provision(pod, request_of(pod))
    assert state(provider, result.instance_id) is InstanceState.PROVISIONING
    fake.queue(False)
    wait_for(lambda: state(provider, result.instance_id) is InstanceState.RUNNING, 30, what="running")
    wait_for(lambda: state(provider, result.instance_id) is InstanceState.SUCCEEDED, 30, what="succeeded")


def test_a_restarted_provider_adopts_and_terminates(fake: FakeRunPod, tmp_path: Path) -> None:
    pod = pod_of("sleep 60")
    first = make(fake, tmp_path).provision(pod, request_of(pod))
    again = make(fake, tmp_path).provision(pod, request_of(pod))
    assert again.instance_id == first.instance_id and again.credential is None
    assert len(fake.pods()) == 1
    fresh = make(fake, tmp_path)
    fresh.terminate(first.instance_id)
    fresh.terminate(first.instance_id)
    assert fresh.get(first.instance_id) is None and fake.pods() == []


def test_another_owners_pods_are_never_seen_or_touched(fake: FakeRunPod, tmp_path: Path) -> None:
    ours = make(fake, tmp_path, Owner("cluster-a", "runpod"))
    theirs = make(fake, tmp_path, Owner("cluster-b", "runpod"))
    pod = pod_of("sleep 60")
    mine = ours.provision(pod, request_of(pod))
    other = theirs.provision(pod, request_of(pod))  # the same claim: a different owner's own pod
    assert other.instance_id != mine.instance_id
    assert [i.id for i in ours.list()] == [mine.instance_id]
    assert ours.get(other.instance_id) is None
    ours.terminate(other.instance_id)
    assert {p.id for p in fake.pods()} == {mine.instance_id, other.instance_id}


def test_a_spot_pod_bids_the_minimum_and_an_interruption_is_preempted(fake: FakeRunPod, tmp_path: Path) -> None:
    provider = make(fake, tmp_path, bid_multiplier=1.5, regions=["EU-RO-1", "US-TX-3"])
    pod = pod_of("sleep 600", accelerator="a40", gpu_count=2)
    result = provider.provision(pod, request_of(pod, capacity_type=Tier.SPOT))
    (view,) = fake.pods()
    spot = next(o for o in provider.offerings() if o.instance_type == "NVIDIA A40" and o.tier is Tier.SPOT)
    assert view.interruptible and view.gpu_type == "NVIDIA A40" and view.gpu_count == 2
    assert view.data_center == "EU-RO-1"
    assert spot.hourly_price is not None and view.bid == pytest.approx(spot.hourly_price * 1.5)
    wait_for(lambda: state(provider, result.instance_id) is InstanceState.RUNNING, 30, what="running")
    fake.interrupt(result.instance_id)
    found = provider.get(result.instance_id)
    assert found is not None and found.state is InstanceState.TERMINATED and found.preempted
    assert found.capacity_type is Tier.SPOT and found.region == "EU-RO-1"


def test_an_on_demand_pod_stopped_outside_nebula_is_terminated_but_not_preempted(
    fake: FakeRunPod, tmp_path: Path
) -> None:
    provider = make(fake, tmp_path)
    assert not isinstance(provider, NoticeSource)  # RunPod's API says nothing ahead of a reclaim
    spot_pod, reserved_pod = pod_of("sleep 600", accelerator="a40"), pod_of("sleep 600", accelerator="a40")
    spot = provider.provision(spot_pod, request_of(spot_pod, capacity_type=Tier.SPOT)).instance_id
    reserved = provider.provision(reserved_pod, request_of(reserved_pod, capacity_type=Tier.ON_DEMAND)).instance_id
    running = {InstanceState.RUNNING}
    wait_for(lambda: {state(provider, spot), state(provider, reserved)} == running, 30, what="both running")
    fake.interrupt(spot)
    with fake.lock:
        fake.stop_pod(fake.records[reserved], "EXITED")  # someone stopped it in RunPod's console
    listed = {i.id: i for i in provider.list()}
    assert (listed[spot].state, listed[spot].preempted) == (InstanceState.TERMINATED, True)
    assert (listed[reserved].state, listed[reserved].preempted) == (InstanceState.TERMINATED, False)
    assert listed[reserved].message == "the pod was stopped outside Nebula"


def test_offerings_carry_runpods_prices_and_regions_expand(fake: FakeRunPod, tmp_path: Path) -> None:
    provider = make(fake, tmp_path, regions=["US-TX-3", "EU-RO-1"], cloud_type="COMMUNITY")
    offerings = provider.offerings()
    one = {(o.accelerator, o.tier): o for o in offerings if o.gpu_count == 1 and o.region == "US-TX-3"}
    assert one[("rtx4090", Tier.ON_DEMAND)].hourly_price is not None
    two = next(o for o in offerings if o.accelerator == "rtx4090" and o.gpu_count == 2 and o.tier is Tier.ON_DEMAND)
    assert two.hourly_price == pytest.approx(2 * (one[("rtx4090", Tier.ON_DEMAND)].hourly_price or 0))
    assert provider.expand_regions(["eu", "us", "*", "us-tx-3", "nowhere"]) == ["EU-RO-1", "US-TX-3"]
    caps = provider.capabilities()
    assert caps.tiers == (Tier.ON_DEMAND, Tier.SPOT) and caps.bills_after_exit


def test_without_ssh_a_pod_with_a_runtime_is_running_and_logs_are_not_supported(
    fake: FakeRunPod, tmp_path: Path
) -> None:
    from providers.base import LogOptions
    from providers.errors import NotSupported

    provider = make(fake, tmp_path, ssh=False)
    pod = pod_of("sleep 600")
    result = provider.provision(pod, request_of(pod))
    wait_for(lambda: state(provider, result.instance_id) is InstanceState.RUNNING, 30, what="running")
    with pytest.raises(NotSupported, match="ssh"):
        provider.logs(result.instance_id, LogOptions())
    assert provider.capabilities().log_timestamps is False


def test_a_container_restart_after_the_exit_does_not_run_the_workload_again(fake: FakeRunPod, tmp_path: Path) -> None:
    provider = make(fake, tmp_path)
    pod = pod_of("echo ran >> /root/runs; exit 0")
    result = provider.provision(pod, request_of(pod))
    wait_for(lambda: state(provider, result.instance_id) is InstanceState.SUCCEEDED, 30, what="succeeded")
    fake.kill(result.instance_id)  # RunPod restarts the container
    wait_for(lambda: len(fake.exit_codes(result.instance_id)) >= 1, 30, what="the kill")
    wait_for(lambda: fake.box(result.instance_id).ssh_listening(), 30, what="the restarted container")
    fresh = make(fake, tmp_path)  # no cached verdict: read over SSH again
    wait_for(lambda: state(fresh, result.instance_id) is InstanceState.SUCCEEDED, 30, what="succeeded again")
    assert fake.box(result.instance_id).file("/root/runs").read_text() == "ran\n"


@pytest.mark.parametrize("egress", [Egress(EgressMode.BLOCKED), allowlist(["10.0.0.0/8"])])
def test_an_egress_policy_runpod_cannot_enforce_is_refused_before_any_pod(
    fake: FakeRunPod, tmp_path: Path, egress: Egress
) -> None:
    """RunPod has no outbound firewall: a pool's Blocked or Allowlist is NotSupported, naming
    spec.egress, and nothing is deployed."""
    provider = make(fake, tmp_path)
    assert provider.capabilities().egress == frozenset({EgressMode.OPEN})
    pod = pod_of("sleep 60")
    with pytest.raises(errors.NotSupported, match=r"spec\.egress: runpod cannot enforce egress"):
        provider.provision(pod, request_of(pod, egress=egress))
    assert fake.pods() == [] and provider.list() == []
