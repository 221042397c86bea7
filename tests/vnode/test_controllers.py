"""The virtual kubelet against the embedded API server over HTTPS, with the fake provider."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from devcluster import DevCluster
from kube import names
from kube.client import Kube, NotFoundError, path_for
from kube.events import EventRecorder
from kube.operations import OperationLimits
from providers.base import (
    BlockBreadth,
    BlockScope,
    Instance,
    InstanceState,
    PodSpec,
    ProvisionRequest,
    ProvisionResult,
)
from providers.fake import FakeProvider
from tests.support.factories import make_pod
from tests.support.pods import get_pod, phase_of
from tests.support.polling import wait_for
from vnode.handler import Handler
from vnode.podcontroller import MAX_SOURCE_WATCHES
from vnode.runner import Runner
from vnode.sources.env import MissingSource


class RecordingBlocklist:
    def __init__(self) -> None:
        self.records: list[tuple[str, BlockScope, str | None]] = []
        self.interrupted: list[bool] = []  # each record's `interrupted`, in order

    def record(self, provider: str, scope: BlockScope, *, pool: str | None = None, interrupted: bool = False) -> None:
        self.records.append((provider, scope, pool))
        self.interrupted.append(interrupted)


def node(kube: Kube, name: str) -> dict[str, Any] | None:
    try:
        return kube.get(path_for("nodes", name=name))
    except NotFoundError:
        return None


def get_or_none(kube: Kube, path: str) -> dict[str, Any] | None:
    try:
        return kube.get(path)
    except NotFoundError:
        return None


def condition(obj: dict[str, Any] | None, kind: str) -> str | None:
    for entry in ((obj or {}).get("status") or {}).get("conditions") or []:
        if entry.get("type") == kind:
            return str(entry.get("status"))
    return None


def events_for(kube: Kube, name: str) -> list[dict[str, Any]]:
    items, _ = kube.list(path_for("events", namespace="default"), fieldSelector=f"involvedObject.name={name}")
    return items


def test_node_registers_ready_with_taint_capacity_address_and_a_renewing_lease(
    kube: Kube, start_runner: Callable[..., Runner], cloud_name: str
) -> None:
    start_runner(FakeProvider("gpu", {"cloud": cloud_name}))
    registered = wait_for(lambda: condition(node(kube, "nebula-gpu"), "Ready") == "True" and node(kube, "nebula-gpu"))
    assert registered["metadata"]["labels"][names.PROVIDER_KEY] == "gpu"
    assert {"key": names.PROVIDER_KEY, "value": "gpu", "effect": "NoSchedule"} in registered["spec"]["taints"]
    assert {"type": "InternalIP", "address": "127.0.0.1"} in registered["status"]["addresses"]
    assert registered["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"] == 10250
    lease_path = path_for("leases", namespace="kube-node-lease", name="nebula-gpu", group="coordination.k8s.io")
    first = wait_for(lambda: get_or_none(kube, lease_path))
    assert first["spec"]["leaseDurationSeconds"] == 40
    assert first["metadata"]["ownerReferences"][0]["uid"] == registered["metadata"]["uid"]
    wait_for(lambda: kube.get(lease_path)["spec"]["renewTime"] != first["spec"]["renewTime"])


def test_a_deleted_node_is_registered_again(kube: Kube, start_runner: Callable[..., Runner], cloud_name: str) -> None:
    start_runner(FakeProvider("gpu", {"cloud": cloud_name}))
    wait_for(lambda: node(kube, "nebula-gpu"))
    kube.delete(path_for("nodes", name="nebula-gpu"))
    wait_for(lambda: condition(node(kube, "nebula-gpu"), "Ready") == "True")


def test_pod_runs_with_annotations_then_deletion_terminates_and_removes_it(
    kube: Kube, start_runner: Callable[..., Runner], cloud_name: str
) -> None:
    provider = FakeProvider("gpu", {"cloud": cloud_name})
    start_runner(provider)
    kube.create(path_for("pods", namespace="default"), make_pod("web", "gpu"))
    wait_for(lambda: phase_of(kube, "web") == "Running")
    pod = get_pod(kube, "web")
    assert pod is not None
    annotations = pod["metadata"]["annotations"]
    instance_id = annotations[names.INSTANCE_ID_ANNOTATION]
    assert annotations[names.ENDPOINT_ANNOTATION].startswith("fake://")
    assert condition(pod, "Ready") == "True"
    kube.delete(path_for("pods", namespace="default", name="web"))
    wait_for(lambda: get_pod(kube, "web") is None)
    gone = provider.get(instance_id)  # the fake shows a terminated instance (and its output) a while
    assert gone is not None and gone.state is InstanceState.TERMINATED
    assert [i.state for i in provider.list()] == [InstanceState.TERMINATED]


def test_a_refused_provision_fails_the_pod_records_a_block_and_says_why(
    kube: Kube, start_runner: Callable[..., Runner], cloud_name: str
) -> None:
    provider = FakeProvider("gpu", {"cloud": cloud_name})
    provider.cloud.refuse("capacity")
    blocklist = RecordingBlocklist()
    start_runner(provider, blocklister=blocklist)
    kube.create(path_for("pods", namespace="default"), make_pod("big", "gpu"))
    wait_for(lambda: phase_of(kube, "big") == "Failed")
    pod = get_pod(kube, "big")
    assert pod is not None and pod["status"]["reason"] == "ProvisionFailed"
    assert [r[1].breadth for r in blocklist.records] == [BlockBreadth.OFFERING]
    wait_for(lambda: any(e["reason"] == "ProvisionFailed" for e in events_for(kube, "big")))
    assert provider.list() == []


def test_an_auth_refusal_blocks_the_whole_provider(
    kube: Kube, start_runner: Callable[..., Runner], cloud_name: str
) -> None:
    provider = FakeProvider("gpu", {"cloud": cloud_name})
    provider.cloud.refuse("auth")
    blocklist = RecordingBlocklist()
    start_runner(provider, blocklister=blocklist)
    kube.create(path_for("pods", namespace="default"), make_pod("p", "gpu"))
    wait_for(lambda: blocklist.records)
    assert blocklist.records[0][1].breadth is BlockBreadth.PROVIDER


def test_a_pod_waiting_for_a_missing_secret_starts_when_the_secret_appears(
    cluster: DevCluster, kube: Kube, start_runner: Callable[..., Runner], cloud_name: str
) -> None:
    provider = FakeProvider("gpu", {"cloud": cloud_name})
    start_runner(provider)
    env = [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "later", "key": "token"}}}]
    kube.create(path_for("pods", namespace="default"), make_pod("waiter", "gpu", container={"env": env}))
    wait_for(lambda: any(e["reason"] == "MandatorySecretNotFound" for e in events_for(kube, "waiter")))
    assert provider.list() == []
    kube.create(
        path_for("secrets", namespace="default"),
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "later"}, "stringData": {"token": "t0k"}},
    )
    wait_for(lambda: phase_of(kube, "waiter") == "Running", timeout=10)
    # Only that Secret was watched for: the manager never lists every Secret in the cluster.
    reads = [r for r in cluster.request_log.snapshot() if r.resource == "secrets" and r.verb in ("list", "watch")]
    assert reads and all(r.namespace == "default" for r in reads), reads


def test_a_deleted_pod_stops_the_watch_for_the_secret_it_waited_for(
    kube: Kube, start_runner: Callable[..., Runner], cloud_name: str
) -> None:
    runner = start_runner(FakeProvider("gpu", {"cloud": cloud_name}))
    env = [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "never", "key": "token"}}}]
    kube.create(path_for("pods", namespace="default"), make_pod("gives-up", "gpu", container={"env": env}))
    watched = ("Secret", "default", "never")
    wait_for(lambda: watched in runner.pods._source_reflectors)
    kube.delete(path_for("pods", namespace="default", name="gives-up"), grace_seconds=0)
    wait_for(lambda: watched not in runner.pods._source_reflectors and not runner.pods._waiting)
    # A worker whose sync failed just before the deletion registers its wait only after it:
    # found in a stress run, where that late wait kept a watch open for a Pod long gone.
    runner.pods._wait_for(MissingSource("Secret", "default", "never"), "default/gives-up")
    assert watched not in runner.pods._source_reflectors and not runner.pods._waiting


def test_unchanged_pods_cost_no_api_call_per_poll(
    cluster: DevCluster, kube: Kube, start_runner: Callable[..., Runner], cloud_name: str
) -> None:
    start_runner(FakeProvider("gpu", {"cloud": cloud_name}), lease_renew_interval=60)
    for index in range(5):
        kube.create(path_for("pods", namespace="default"), make_pod(f"quiet-{index}", "gpu"))
    wait_for(lambda: all(phase_of(kube, f"quiet-{i}") == "Running" for i in range(5)))
    cluster.request_log.clear()
    import time

    time.sleep(1.5)  # several poll ticks at 0.2 s
    writes = [r for r in cluster.request_log.snapshot() if r.verb not in ("get", "list", "watch")]
    assert [(r.verb, r.resource, r.subresource) for r in writes if r.resource == "pods"] == []


def test_provider_outage_keeps_running_pods_and_marks_the_node_not_ready(
    kube: Kube, start_runner: Callable[..., Runner], cloud_name: str
) -> None:
    """I3: an unreachable provider never fails, recreates or deletes anything."""
    provider = FakeProvider("gpu", {"cloud": cloud_name})
    start_runner(provider)
    kube.create(path_for("pods", namespace="default"), make_pod("steady", "gpu"))
    wait_for(lambda: phase_of(kube, "steady") == "Running")
    provider.cloud.outage()
    wait_for(lambda: condition(node(kube, "nebula-gpu"), "Ready") == "False")
    assert condition(node(kube, "nebula-gpu"), names.CONDITION_PROVIDER_REACHABLE) == "False"
    assert phase_of(kube, "steady") == "Running"
    provider.cloud.clear()
    wait_for(lambda: condition(node(kube, "nebula-gpu"), "Ready") == "True")
    assert phase_of(kube, "steady") == "Running"
    assert len(provider.list()) == 1


def test_an_instance_gone_from_lists_and_get_fails_a_never_pod_as_lost(
    kube: Kube, start_runner: Callable[..., Runner], cloud_name: str
) -> None:
    provider = FakeProvider("gpu", {"cloud": cloud_name})
    start_runner(provider)
    kube.create(path_for("pods", namespace="default"), make_pod("spot", "gpu", restartPolicy="Never"))
    wait_for(lambda: phase_of(kube, "spot") == "Running")
    pod = get_pod(kube, "spot")
    assert pod is not None
    provider.cloud.lose(pod["metadata"]["annotations"][names.INSTANCE_ID_ANNOTATION], vanish=True)
    wait_for(lambda: phase_of(kube, "spot") == "Failed")
    lost = get_pod(kube, "spot")
    assert lost is not None and lost["status"]["reason"] == "InstanceLost"
    assert lost["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 137


def test_an_instance_gone_under_an_always_pod_is_replaced_and_counted_as_a_restart(
    kube: Kube, start_runner: Callable[..., Runner], cloud_name: str
) -> None:
    provider = FakeProvider("gpu", {"cloud": cloud_name})
    start_runner(provider)
    kube.create(path_for("pods", namespace="default"), make_pod("spot", "gpu"))
    wait_for(lambda: phase_of(kube, "spot") == "Running")
    first = (get_pod(kube, "spot") or {})["metadata"]["annotations"][names.INSTANCE_ID_ANNOTATION]
    provider.cloud.lose(first, vanish=True)

    def restarted() -> dict[str, Any] | None:
        pod = get_pod(kube, "spot") or {}
        statuses = (pod.get("status") or {}).get("containerStatuses") or [{}]
        ready = statuses[0].get("restartCount") == 1 and "running" in (statuses[0].get("state") or {})
        return pod if ready else None

    pod = wait_for(restarted, what="the Pod runs again, one restart counted")
    assert pod["metadata"]["annotations"][names.INSTANCE_ID_ANNOTATION] != first
    assert pod["status"]["phase"] == "Running"
    last = pod["status"]["containerStatuses"][0]["lastState"]["terminated"]
    assert (last["exitCode"], last["reason"]) == (137, "InstanceLost")


class HeldList:
    """A provider whose list() takes its answer at once and returns it only when released,
    like a list of many instances that is still running when a provision completes."""

    def __init__(self, inner: FakeProvider) -> None:
        self.inner = inner
        self.entered = threading.Event()
        self.release = threading.Event()

    def list(self) -> list[Instance]:
        answer = self.inner.list()
        self.entered.set()
        assert self.release.wait(30)
        return answer

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_a_list_begun_before_a_provision_completed_does_not_call_its_instance_lost(kube: Kube, cloud_name: str) -> None:
    """Seen under load with the local provider: a poll's list() began, a provision completed
    meanwhile, and the list's answer (without the new instance) failed the Pod as lost."""
    provider = HeldList(FakeProvider("gpu", {"cloud": cloud_name}))
    handler = Handler(provider, kube=kube, events=EventRecorder(kube, component="test"))  # type: ignore[arg-type]
    pod = kube.create(path_for("pods", namespace="default"), make_pod("fresh", "gpu", restartPolicy="Never"))
    polled: list[list[str]] = []
    poll = threading.Thread(target=lambda: polled.append(handler.status_sync.poll_once()))
    poll.start()
    assert provider.entered.wait(30)
    handler.provisioner.create_pod(pod)  # completes while the list is out
    provider.release.set()
    poll.join(30)
    entry = handler.tracked("default/fresh")
    assert entry is not None and entry.desired_status is not None
    assert entry.desired_status["phase"] in ("Pending", "Running") and len(polled) == 1
    handler.status_sync.poll_once()  # a list begun after the provision sees the instance
    assert entry.last_instance is not None and entry.desired_status["phase"] in ("Pending", "Running")
    provider.inner.cloud.lose(entry.instance_id, vanish=True)
    handler.status_sync.poll_once()  # one list that misses it is not proof it is gone
    assert entry.desired_status["phase"] in ("Pending", "Running")
    handler.status_sync.poll_once()  # a second one is, once `get` agrees
    assert entry.desired_status["reason"] == names.REASON_INSTANCE_LOST


class WatchingProvision:
    """A provider that, when asked for its instance right after provisioning, reads the Pod
    from the API: so the test sees what the Pod carried before create_pod returned."""

    def __init__(self, inner: FakeProvider, kube: Kube) -> None:
        self.inner = inner
        self.kube = kube
        self.seen_at_get: list[dict[str, str]] = []

    def get(self, instance_id: str) -> Instance | None:
        pod = get_pod(self.kube, "recorded") or {}
        self.seen_at_get.append(dict(pod.get("metadata", {}).get("annotations") or {}))
        return self.inner.get(instance_id)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_I2_the_instance_id_is_on_the_pod_before_create_pod_returns(kube: Kube, cloud_name: str) -> None:
    provider = WatchingProvision(FakeProvider("gpu", {"cloud": cloud_name}), kube)
    handler = Handler(provider, kube=kube, events=EventRecorder(kube, component="test"))  # type: ignore[arg-type]
    pod = kube.create(path_for("pods", namespace="default"), make_pod("recorded", "gpu"))
    handler.provisioner.create_pod(pod)
    entry = handler.tracked("default/recorded")
    assert entry is not None and entry.instance_id is not None  # in memory
    on_pod = get_pod(kube, "recorded") or {}
    assert on_pod["metadata"]["annotations"][names.INSTANCE_ID_ANNOTATION] == entry.instance_id  # and on the Pod
    # The one `get` after provisioning came first: the annotation went in one write with the
    # status that answer gave (Running), not a write of its own before it.
    assert names.INSTANCE_ID_ANNOTATION not in provider.seen_at_get[0]
    assert on_pod["status"]["phase"] == "Running"
    assert handler.writer.needs_flush(entry) is False  # nothing left for the caller's flush


class BrokenAnswer(WatchingProvision):
    """A provider whose `get` right after provisioning fails with something no provider should
    raise (a bug in an SDK): the instance id must reach the Pod all the same."""

    def get(self, instance_id: str) -> Instance | None:
        raise RuntimeError("the SDK broke")


def test_I2_the_instance_id_reaches_the_pod_even_when_the_first_answer_breaks(kube: Kube, cloud_name: str) -> None:
    provider = BrokenAnswer(FakeProvider("gpu", {"cloud": cloud_name}), kube)
    handler = Handler(provider, kube=kube, events=EventRecorder(kube, component="test"))  # type: ignore[arg-type]
    pod = kube.create(path_for("pods", namespace="default"), make_pod("broken", "gpu"))
    with pytest.raises(RuntimeError, match="the SDK broke"):
        handler.provisioner.create_pod(pod)  # not a success: the worker retries it
    entry = handler.tracked("default/broken")
    assert entry is not None and entry.instance_id is not None
    on_pod = get_pod(kube, "broken") or {}
    assert on_pod["metadata"]["annotations"][names.INSTANCE_ID_ANNOTATION] == entry.instance_id


def test_I7_missing_sources_watched_at_once_are_bounded(
    kube: Kube, start_runner: Callable[..., Runner], cloud_name: str
) -> None:
    """A Pod naming more missing Secrets than MAX_SOURCE_WATCHES opens no more watches; the
    rest wait on the Pod's retry backoff."""
    runner = start_runner(FakeProvider("gpu", {"cloud": cloud_name}))
    env = [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "first", "key": "token"}}}]
    kube.create(path_for("pods", namespace="default"), make_pod("greedy", "gpu", container={"env": env}))
    wait_for(lambda: ("Secret", "default", "first") in runner.pods._source_reflectors)
    for index in range(MAX_SOURCE_WATCHES + 2):
        runner.pods._wait_for(MissingSource("Secret", "default", f"s{index}"), "default/greedy")
    assert len(runner.pods._source_reflectors) == MAX_SOURCE_WATCHES
    assert len(runner.pods._waiting) == MAX_SOURCE_WATCHES + 3  # every wait is remembered


class GatedProvision(FakeProvider):
    """A fake whose provision for the claim of Pod `slow` waits until `release` is set."""

    def __init__(self, name: str, options: dict[str, Any]) -> None:
        super().__init__(name, options)
        self.release = threading.Event()
        self.entered = threading.Event()

    def provision(self, pod: PodSpec, request: ProvisionRequest) -> ProvisionResult:
        if "slow" in request.claim:
            self.entered.set()
            self.release.wait(60)
        return super().provision(pod, request)


def test_a_slow_provision_holds_only_its_own_pod_and_each_pod_gets_one_instance(
    kube: Kube, start_runner: Callable[..., Runner], cloud_name: str
) -> None:
    provider = GatedProvision("gpu", {"cloud": cloud_name})
    runner = start_runner(provider, workers=1, operations=OperationLimits(concurrency=4))
    try:
        kube.create(path_for("pods", namespace="default"), make_pod("slow", "gpu"))
        assert provider.entered.wait(30)
        # A change to the Pod while its provision runs queues it again: never a second provision.
        kube.patch(path_for("pods", namespace="default", name="slow"), {"metadata": {"labels": {"touched": "1"}}})
        kube.create(path_for("pods", namespace="default"), make_pod("quick", "gpu"))
        # The one worker is free: the other Pod is provisioned, Running, deleted and gone
        # while the first provision still waits on the cloud.
        wait_for(lambda: phase_of(kube, "quick") == "Running", what="quick Running beside a stuck provision")
        kube.delete(path_for("pods", namespace="default", name="quick"))
        wait_for(lambda: get_pod(kube, "quick") is None, what="quick deleted beside a stuck provision")
        # Quick's operation returns just after its final DELETE lands: then only slow's provision runs.
        wait_for(lambda: runner.pods.operations.running == 1, what="only the stuck provision still running")
        assert phase_of(kube, "slow") == "Pending"
    finally:
        provider.release.set()
    wait_for(lambda: phase_of(kube, "slow") == "Running", what="slow Running once its provision returns")
    slow = get_pod(kube, "slow")
    assert slow is not None
    live = [i for i in provider.list() if i.state is InstanceState.RUNNING]
    assert [i.id for i in live] == [slow["metadata"]["annotations"][names.INSTANCE_ID_ANNOTATION]]  # I1, I2
    assert len([c for c in provider.cloud.call_log("provision") if "slow" in c.args]) == 1
