"""The latency of one Pod (issue 37): provisioning's own answer writes a Pod Running and a
terminate's answer lets it go, without waiting for the next poll's list; and neither answer
moves a Pod back past a newer one, in either order (facts ordered by when they were read:
vnode.phases.provision `_take_first_answer`, vnode.phases.statussync `_older_than_recorded`),
and vnode.phases.stopping's look right after the SIGTERM. Behaviour only: the figures are
`python bench/sync.py --pods 20 --serial`'s.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from kube.client import Kube, path_for
from kube.events import EventRecorder
from providers import errors
from providers.base import Instance, InstanceId, InstanceState, PodSpec, ProvisionRequest, ProvisionResult
from providers.fake import FakeProvider
from tests.support.factories import make_pod
from tests.support.pods import get_pod, phase_of
from tests.support.polling import wait_for
from tests.support.rigs.offline import adopt_provisioned, kept_fake_handler
from vnode.handler import Handler
from vnode.model.stopping import Why
from vnode.phases.stopping import FIRST_LOOK
from vnode.runner import Runner

NEVER = 3600.0  # a poll interval no test outlives: a poll after the first would take an hour
BOOT = 3.0  # seconds the fake takes from PROVISIONING to RUNNING in the stale-answer tests
SLOW_BOOT = {
    "offerings": [
        {"accelerator": None, "gpu_count": 0, "tier": "OnDemand", "region": "us-east-1", "provisioning_delay": BOOT}
    ]
}


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def _count_ticks(handler: Handler) -> list[int]:
    """Counts the status sync's poll ticks from now (its loop calls `self.poll_once`)."""
    ticks = [0]
    tick = handler.status_sync.poll_once

    def counted(*args: Any, **kwargs: Any) -> list[str]:
        ticks[0] += 1
        return tick(*args, **kwargs)

    handler.status_sync.poll_once = counted  # type: ignore[method-assign]
    return ticks


def test_a_pod_is_written_running_and_removed_after_delete_without_waiting_for_a_poll(
    kube: Kube, start_runner: Callable[..., Runner], cloud_name: str
) -> None:
    """Poll interval one hour: the startup's poll has run, the next would come in an hour, yet
    the Pod reads Running (with the status a poll would write: a tick by hand finds nothing
    to write) and, once deleted, is gone: both from the provider's own answers."""
    runner = start_runner(FakeProvider("gpu", {"cloud": cloud_name}), poll_interval=NEVER)
    handler = runner.handler
    wait_for(lambda: handler.inventory.lists_ok >= 1, what="the startup's poll")
    ticks = _count_ticks(handler)
    name = _name("quick")
    kube.create(path_for("pods", namespace="default"), make_pod(name, "gpu"))
    wait_for(lambda: phase_of(kube, name) == "Running", timeout=60, what="Running before any poll")
    pod = get_pod(kube, name)
    assert pod is not None and {c["type"]: c["status"] for c in pod["status"]["conditions"]}["Ready"] == "True"
    entry = handler.tracked(f"default/{name}")
    assert entry is not None and entry.last_instance is not None
    assert entry.last_instance.state is InstanceState.RUNNING
    wait_for(lambda: not handler.writer.needs_flush(entry), what="the provisioning's writes done")
    assert ticks[0] == 0  # no poll brought it there
    assert f"default/{name}" not in handler.status_sync.poll_once()  # a poll has nothing to add
    ticks[0] = 0
    kube.delete(path_for("pods", namespace="default", name=name))  # graceful: 30 s, the default
    wait_for(lambda: get_pod(kube, name) is None, timeout=60, what="gone before any poll")
    assert ticks[0] == 0
    instance = handler.provider.get(entry.last_instance.id)
    assert instance is not None and instance.state is InstanceState.TERMINATED


class HeldGet:
    """A provider whose first `get` reads its answer at once and hands it back only when
    released: by then the answer is stale (the instance booted meanwhile)."""

    def __init__(self, inner: FakeProvider) -> None:
        self.inner = inner
        self.asked = threading.Event()
        self.release = threading.Event()
        self.answers: list[Instance | None] = []

    def get(self, instance_id: InstanceId) -> Instance | None:
        answer = self.inner.get(instance_id)
        if not self.answers:
            self.answers.append(answer)
            self.asked.set()
            assert self.release.wait(60)
        return answer

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_a_provision_answer_older_than_a_list_already_applied_does_not_move_the_pod_back(
    kube: Kube, cloud_name: str
) -> None:
    provider = HeldGet(FakeProvider("gpu", {"cloud": cloud_name, "scenario": SLOW_BOOT}))
    handler = Handler(provider, kube=kube, events=EventRecorder(kube, component="test"))  # type: ignore[arg-type]
    name = _name("stale-get")
    pod = kube.create(path_for("pods", namespace="default"), make_pod(name, "gpu"))
    creating = threading.Thread(target=handler.provisioner.create_pod, args=(pod,))
    creating.start()
    assert provider.asked.wait(60)
    (stale,) = provider.answers
    assert stale is not None and stale.state is InstanceState.PROVISIONING  # read before it booted
    wait_for(lambda: (provider.inner.get(stale.id) or stale).state is InstanceState.RUNNING, what="booted")
    handler.status_sync.poll_once()  # a list begun after the get was asked: Running
    entry = handler.tracked(f"default/{name}")
    assert entry is not None and (entry.desired_status or {}).get("phase") == "Running"
    provider.release.set()
    creating.join(60)
    assert not creating.is_alive()
    assert entry.last_instance is not None and entry.last_instance.state is InstanceState.RUNNING
    assert (entry.desired_status or {}).get("phase") == "Running"


class ListDuringProvision:
    """A provider whose provision returns only once a poll's list has read the new instance
    (still booting), that list held until released; its `get` answers once the instance runs:
    the list is older than provisioning's answer and arrives after it."""

    def __init__(self, inner: FakeProvider) -> None:
        self.inner = inner
        self.provisioned = threading.Event()
        self.listed = threading.Event()
        self.release = threading.Event()
        self.listed_states: list[InstanceState] = []

    def provision(self, pod: PodSpec, request: ProvisionRequest) -> ProvisionResult:
        result = self.inner.provision(pod, request)
        self.provisioned.set()
        assert self.listed.wait(60)
        return result

    def list(self) -> list[Instance]:
        answer = self.inner.list()
        if self.provisioned.is_set() and not self.listed.is_set():
            self.listed_states = [i.state for i in answer]
            self.listed.set()
            assert self.release.wait(60)
        return answer

    def get(self, instance_id: InstanceId) -> Instance | None:
        def running() -> Instance | None:
            got = self.inner.get(instance_id)
            return got if got is not None and got.state is InstanceState.RUNNING else None

        found: Instance = wait_for(running, what="booted")
        return found

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_a_list_begun_before_provisioning_answered_does_not_move_the_pod_back(kube: Kube, cloud_name: str) -> None:
    provider = ListDuringProvision(FakeProvider("gpu", {"cloud": cloud_name, "scenario": SLOW_BOOT}))
    handler = Handler(provider, kube=kube, events=EventRecorder(kube, component="test"))  # type: ignore[arg-type]
    name = _name("stale-list")
    pod = kube.create(path_for("pods", namespace="default"), make_pod(name, "gpu"))
    creating = threading.Thread(target=handler.provisioner.create_pod, args=(pod,))
    creating.start()
    assert provider.provisioned.wait(60)
    polled: list[list[str]] = []
    poll = threading.Thread(target=lambda: polled.append(handler.status_sync.poll_once()))
    poll.start()
    creating.join(60)
    assert not creating.is_alive()
    assert provider.listed_states == [InstanceState.PROVISIONING]  # the held list read it booting
    entry = handler.tracked(f"default/{name}")
    assert entry is not None and (entry.desired_status or {}).get("phase") == "Running"
    provider.release.set()
    poll.join(60)
    assert len(polled) == 1
    assert entry.last_instance is not None and entry.last_instance.state is InstanceState.RUNNING
    assert (entry.desired_status or {}).get("phase") == "Running"


class GetOutDuringList:
    """A provider whose `get` after provisioning, once asked, waits for `answer`, then answers
    as `mode` says: "running" (once the instance runs), "none" or "unavailable". Its first
    `list` begun after the get was asked reads the instance and is held until `release`: the
    list begins after the get and reads before it, landing before or after it. `early`: that
    list is the first begun once the instance exists, and `provision` returns only once it
    has read the instance (the list begins before provisioning answered)."""

    def __init__(self, inner: FakeProvider, mode: str = "running", *, early: bool = False) -> None:
        self.inner, self.mode, self.early = inner, mode, early
        self.provisioned = threading.Event()
        self.asked = threading.Event()
        self.read = threading.Event()
        self.answer = threading.Event()
        self.release = threading.Event()
        self.listed: list[InstanceState] | None = None

    def provision(self, pod: PodSpec, request: ProvisionRequest) -> ProvisionResult:
        result = self.inner.provision(pod, request)
        self.provisioned.set()
        assert not self.early or self.read.wait(60)
        return result

    def get(self, instance_id: InstanceId) -> Instance | None:
        self.asked.set()
        assert self.answer.wait(60)
        if self.mode == "unavailable":
            raise errors.Unavailable("held get failed")
        if self.mode == "none":
            return None

        def running() -> Instance | None:
            got = self.inner.get(instance_id)
            return got if got is not None and got.state is InstanceState.RUNNING else None

        found: Instance = wait_for(running, what="booted")
        return found

    def list(self) -> list[Instance]:
        answer = self.inner.list()
        if (self.provisioned if self.early else self.asked).is_set() and self.listed is None:
            self.listed = [i.state for i in answer]
            self.read.set()
            assert self.release.wait(60)
        return answer

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _provisioning(kube: Kube, provider: Any, prefix: str) -> tuple[Handler, str, threading.Thread]:
    """A Handler on `provider` and a Pod being provisioned on a thread, its get asked."""
    handler = Handler(provider, kube=kube, events=EventRecorder(kube, component="test"))
    name = _name(prefix)
    pod = kube.create(path_for("pods", namespace="default"), make_pod(name, "gpu"))
    creating = threading.Thread(target=handler.provisioner.create_pod, args=(pod,))
    creating.start()
    assert provider.asked.wait(60)
    return handler, f"default/{name}", creating


def _phase(handler: Handler, key: str) -> str | None:
    entry = handler.tracked(key)
    assert entry is not None
    return (entry.desired_status or {}).get("phase")


def test_a_list_begun_after_the_get_but_read_before_it_does_not_move_the_pod_back(kube: Kube, cloud_name: str) -> None:
    """The review's probe: the list lands after the get's answer (Running) was applied."""
    provider = GetOutDuringList(FakeProvider("gpu", {"cloud": cloud_name, "scenario": SLOW_BOOT}))
    handler, key, creating = _provisioning(kube, provider, "list-after-get")
    poll = threading.Thread(target=handler.status_sync.poll_once)
    poll.start()  # begun after the get was asked
    wait_for(lambda: provider.listed is not None, what="the list read")
    assert provider.listed == [InstanceState.PROVISIONING]
    provider.answer.set()
    creating.join(60)
    assert not creating.is_alive() and _phase(handler, key) == "Running"
    provider.release.set()
    poll.join(60)
    entry = handler.tracked(key)
    assert entry is not None and entry.last_instance is not None
    assert entry.last_instance.state is InstanceState.RUNNING and _phase(handler, key) == "Running"


def test_a_get_answer_read_after_a_list_that_landed_first_is_dropped_and_the_next_list_applies(
    kube: Kube, cloud_name: str
) -> None:
    """The other order: the list (booting) lands while the get is out; the get's answer,
    begun before that list returned, cannot be ordered after it, so it is dropped (never
    applied over a list it may predate); the next list applies Running."""
    provider = GetOutDuringList(FakeProvider("gpu", {"cloud": cloud_name, "scenario": SLOW_BOOT}))
    handler, key, creating = _provisioning(kube, provider, "get-after-list")
    provider.release.set()
    handler.status_sync.poll_once()
    assert provider.listed == [InstanceState.PROVISIONING] and _phase(handler, key) == "Pending"
    provider.answer.set()
    creating.join(60)
    assert not creating.is_alive()
    entry = handler.tracked(key)
    assert entry is not None and entry.last_instance is not None
    assert entry.last_instance.state is InstanceState.PROVISIONING  # the list's facts stand
    handler.status_sync.poll_once()
    assert entry.last_instance.state is InstanceState.RUNNING and _phase(handler, key) == "Running"


@pytest.mark.parametrize("early", [True, False], ids=["list-begun-before-provision-answered", "list-begun-after-get"])
@pytest.mark.parametrize("mode", ["none", "unavailable"])
def test_a_failed_or_empty_get_after_provisioning_does_not_override_a_list_applied_meanwhile(
    kube: Kube, cloud_name: str, mode: str, early: bool
) -> None:
    """The get answers nothing usable: what provisioning said (booting) is older than the
    list applied while the get was out (Running), and is not applied over it."""
    provider = GetOutDuringList(FakeProvider("gpu", {"cloud": cloud_name}), mode, early=early)  # runs at once
    handler = Handler(provider, kube=kube, events=EventRecorder(kube, component="test"))  # type: ignore[arg-type]
    name = _name(f"failed-get-{mode}")
    pod = kube.create(path_for("pods", namespace="default"), make_pod(name, "gpu"))
    creating = threading.Thread(target=handler.provisioner.create_pod, args=(pod,))
    poll = threading.Thread(target=handler.status_sync.poll_once)
    creating.start()
    assert (provider.provisioned if early else provider.asked).wait(60)
    poll.start()
    assert provider.asked.wait(60)  # the get is out; the list has read the instance, held
    provider.release.set()
    poll.join(60)
    key = f"default/{name}"
    assert provider.listed == [InstanceState.RUNNING] and _phase(handler, key) == "Running"
    provider.answer.set()
    creating.join(60)
    assert not creating.is_alive()
    entry = handler.tracked(key)
    assert entry is not None and entry.last_instance is not None
    assert entry.last_instance.state is InstanceState.RUNNING and _phase(handler, key) == "Running"


class LookupDuringGet:
    """A provider whose `get` first has a cold lookup list (`Inventory.lookup`, which the
    status sync never applies) read the instance, then answers once it runs."""

    def __init__(self, inner: FakeProvider) -> None:
        self.inner = inner
        self.lookup: Callable[[], object] = lambda: None

    def get(self, instance_id: InstanceId) -> Instance | None:
        self.lookup()
        return self.inner.get(instance_id)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_a_cold_lookup_list_during_the_get_does_not_drop_its_answer(kube: Kube, cloud_name: str) -> None:
    provider = LookupDuringGet(FakeProvider("gpu", {"cloud": cloud_name}))  # runs at once
    handler = Handler(provider, kube=kube, events=EventRecorder(kube, component="test"))  # type: ignore[arg-type]
    name = _name("cold-lookup")
    pod = kube.create(path_for("pods", namespace="default"), make_pod(name, "gpu"))
    lists = handler.inventory.lists_ok
    provider.lookup = lambda: handler.inventory.lookup(pod)
    handler.provisioner.create_pod(pod)
    assert handler.inventory.lists_ok == lists + 1  # the lookup listed, after the get began
    assert _phase(handler, f"default/{name}") == "Running"  # the get's answer, no poll needed


def test_a_container_that_ends_on_sigterm_is_seen_ended_by_the_look_right_after_the_signal() -> None:
    handler, _, _ = kept_fake_handler("latency")
    pod = make_pod(_name("ends"), namespace="default", uid=str(uuid.uuid4()), status={"phase": "Running"})
    entry = handler.tracked(adopt_provisioned(handler, pod, running=True))
    assert entry is not None
    handler.stopping.begin(entry, Why.DELETED, 30.0)
    assert handler.stopping.advance(entry) is None  # ended: terminate may follow at once
    assert entry.last_instance is not None and entry.last_instance.state is InstanceState.FAILED
    assert entry.last_instance.exit_code == 143


def test_a_container_that_traps_sigterm_keeps_its_grace_and_is_looked_at_again() -> None:
    handler, _, _ = kept_fake_handler("latency", {"workload": {"sigterm": {"seconds": 300}}})
    pod = make_pod(_name("traps"), namespace="default", uid=str(uuid.uuid4()), status={"phase": "Running"})
    entry = handler.tracked(adopt_provisioned(handler, pod, running=True))
    assert entry is not None
    handler.stopping.begin(entry, Why.DELETED, 30.0)
    after = handler.stopping.advance(entry)
    assert after is not None and 0 < after <= FIRST_LOOK  # still running: the next look, as before
    assert entry.last_instance is not None and entry.last_instance.state is InstanceState.RUNNING
    assert entry.stop is not None and entry.stop.kill_by is not None  # its SIGKILL still a grace away


def test_a_deleted_pod_takes_one_operation_and_the_event_of_its_final_status_write_none(
    kube: Kube, start_runner: Callable[..., Runner], cloud_name: str
) -> None:
    """Each handoff to the operation pool spends one of the provider's operation tokens (its API
    quota). The final status write's watch event lands after the grace-0 delete, while the
    cache still holds the Pod: its sync must not hand the Pod over again for a step that calls
    nothing (10,000 deletions spent 17,555 handoffs, bench/sync.py)."""
    runner = start_runner(FakeProvider("gpu", {"cloud": cloud_name}), poll_interval=NEVER)
    name = _name("once")
    kube.create(path_for("pods", namespace="default"), make_pod(name, "gpu"))
    wait_for(lambda: phase_of(kube, name) == "Running", timeout=60, what="Running")
    key = f"default/{name}"
    handed: list[str] = []
    submit = runner.pods.operations.submit

    def counted(work: Callable[[], None]) -> bool:
        handed.append(key)
        return submit(work)

    runner.pods.operations.submit = counted  # type: ignore[method-assign]
    being_deleted = kube.delete(path_for("pods", namespace="default", name=name))
    assert being_deleted["metadata"].get("deletionTimestamp")
    wait_for(lambda: get_pod(kube, name) is None, timeout=60, what="gone")
    wait_for(lambda: runner.pods.pods.cache.get(key) is None, timeout=30, what="the DELETED event applied")
    assert handed == [key]  # the teardown, once
    with runner.pods.pods.lock:  # as the cache held it between the final status write and DELETED
        runner.pods.pods.cache[key] = being_deleted
    try:
        assert runner.pods.sync(key) is None
    finally:
        with runner.pods.pods.lock:
            runner.pods.pods.cache.pop(key, None)
    assert handed == [key]
