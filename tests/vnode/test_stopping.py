"""The one stop path (vnode.model.stopping, vnode.phases.stopping): the grace a stop gets, the
deadline counted from startTime, the preStop hook before the SIGTERM, the Pod past its deadline
`Failed/DeadlineExceeded` with its final status written before its instance goes, and the
DisruptionTarget a preemption carries. End to end per provider: tests/vnode/test_time_*.py."""

from __future__ import annotations

import threading
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from kube.times import rfc3339
from providers import errors
from providers.base import Instance, InstanceId, InstanceState
from providers.claim import claim_name
from providers.fake import FakeProvider
from tests.support.factories import make_pod
from tests.support.polling import wait_for
from tests.support.rigs.offline import KeptEvents, KeptPatches, adopt_provisioned, kept_fake_handler, offline_handler
from vnode.handler import Handler
from vnode.model import stopping
from vnode.model.probespec import ExecAction, HttpAction, InvalidProbe
from vnode.model.stopping import SleepAction, Stop, Why
from vnode.phases.stopping import HookPool, killed


def test_the_grace_of_a_deleted_pod_is_its_deletion_grace_else_its_termination_grace_else_30s() -> None:
    assert stopping.deletion_grace(make_pod()) == 30.0
    assert stopping.deletion_grace(make_pod(terminationGracePeriodSeconds=60)) == 60.0
    deleted = make_pod(terminationGracePeriodSeconds=60, metadata={"deletionGracePeriodSeconds": 3})
    assert stopping.deletion_grace(deleted) == 3.0
    assert stopping.deletion_grace(make_pod(metadata={"deletionGracePeriodSeconds": 0})) == 0.0
    assert stopping.termination_grace(deleted) == 60.0  # a deadline stops with the spec's grace


def test_the_deadline_counts_from_start_time_and_none_before_the_pod_started() -> None:
    started = datetime(2026, 12, 5, 1, 0, 0, tzinfo=UTC)
    pod = make_pod(activeDeadlineSeconds=5, status={"startTime": rfc3339(started)})
    assert stopping.deadline_of(pod) == started + timedelta(seconds=5)
    assert stopping.deadline_of(make_pod(activeDeadlineSeconds=5)) is None  # not started yet
    assert stopping.deadline_of(make_pod(status={"startTime": rfc3339(started)})) is None  # no deadline


def test_a_shorter_grace_moves_the_end_closer_and_a_longer_one_never_moves_it_out() -> None:
    stop = Stop(Why.DELETED, began=100.0, grace=30.0)
    assert not stop.shorten(60.0, now=101.0)
    assert stop.ends == 130.0
    assert stop.shorten(0.0, now=105.0)  # a --force after a graceful delete
    assert stop.ends == 105.0
    assert stop.remaining(106.0) == 0.0
    hooked = Stop(Why.DELETED, began=0.0, grace=3.0, hooks_ran=True)
    assert hooked.remaining(2.9) == stopping.MINIMUM_GRACE  # the kubelet's 2 s after a hook


def test_pre_stop_handlers_are_read_as_a_kubelet_runs_them() -> None:
    def container(pre_stop: dict[str, Any]) -> dict[str, Any]:
        return {"name": "main", "ports": [{"name": "http", "containerPort": 8080}], "lifecycle": {"preStop": pre_stop}}

    assert stopping.pre_stop({"name": "main"}) is None
    assert stopping.pre_stop(container({"exec": {"command": ["sh", "-c", "x"]}})) == ExecAction(("sh", "-c", "x"))
    hook = stopping.pre_stop(container({"httpGet": {"port": "http", "path": "/drain"}}))
    assert isinstance(hook, HttpAction) and (hook.port, hook.path) == (8080, "/drain")
    assert stopping.pre_stop(container({"sleep": {"seconds": 4}})) == SleepAction(4)
    with pytest.raises(InvalidProbe, match="tcpSocket"):
        stopping.pre_stop(container({"tcpSocket": {"port": 8080}}))


def test_a_status_past_its_deadline_reads_failed_deadline_exceeded_and_not_ready() -> None:
    running = {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-12-05T01:00:00Z"}],
        "containerStatuses": [{"name": "main", "ready": True, "state": {"running": {}}}],
    }
    late = stopping.deadline_status(running, now="2026-12-05T01:00:05Z")
    assert (late["phase"], late["reason"], late["message"]) == ("Failed", "DeadlineExceeded", stopping.DEADLINE_MESSAGE)
    assert late["conditions"] == [
        {"type": "Ready", "status": "False", "reason": "PodFailed", "lastTransitionTime": "2026-12-05T01:00:05Z"}
    ]
    assert late["containerStatuses"][0]["ready"] is False
    assert stopping.deadline_status(late, now="2026-12-05T01:09:00Z") is late  # nothing new to write
    assert "DisruptionTarget" not in str(late)  # a kubelet sets none for a deadline


def test_a_disruption_target_is_the_kubelets_and_keeps_its_transition_time() -> None:
    once = stopping.with_disruption_target({"conditions": []}, message="reclaimed", now="2026-12-05T01:00:00Z")
    (condition,) = once["conditions"]
    assert condition["type"] == "DisruptionTarget" and condition["status"] == "True"
    assert (condition["reason"], condition["message"]) == ("TerminationByKubelet", "reclaimed")
    again = stopping.with_disruption_target(once, message="reclaimed", now="2026-12-05T02:00:00Z")
    assert again["conditions"][0]["lastTransitionTime"] == "2026-12-05T01:00:00Z"


def _cloud(handler: Handler) -> Any:
    assert isinstance(handler.provider, FakeProvider)
    return handler.provider.cloud


def _pod(name: str, **fields: Any) -> dict[str, Any]:
    return make_pod(name, namespace="default", uid=str(uuid.uuid4()), command=("sleep", "300"), **fields)


def test_a_pod_past_its_deadline_after_an_adoption_fails_deadline_exceeded_and_its_instance_goes() -> None:
    """The deadline counts from the Pod's startTime, so a restarted manager that adopts the Pod
    late still ends it at once: Failed/DeadlineExceeded written, the kubelet's Event, then the
    container stopped, its end written, and the instance terminated."""
    handler, writes, events = kept_fake_handler("stopping")
    started = datetime.now(UTC) - timedelta(seconds=6)
    pod = _pod("late", activeDeadlineSeconds=5, status={"phase": "Running", "startTime": rfc3339(started)})
    key = adopt_provisioned(handler, pod, running=True)
    assert handler.lifecycle.step_due(key)
    wait_for(lambda: handler.lifecycle.carry_out(key, pod) is None, what="the deadline carried out")
    statuses = [body["status"] for path, body in writes.patches if path.endswith("/status")]
    assert statuses[0]["phase"] == "Failed" and statuses[0]["reason"] == "DeadlineExceeded"
    final = statuses[-1]
    assert (final["phase"], final["reason"], final["message"]) == (
        "Failed",
        "DeadlineExceeded",
        stopping.DEADLINE_MESSAGE,
    )
    assert "terminated" in final["containerStatuses"][0]["state"]
    handler.flush(key, pod)  # the entry's own Events
    told = [(kind, reason) for _, kind, reason, _ in events.told]
    assert ("Normal", "DeadlineExceeded") in told and ("Normal", "Killing") in told
    calls = [c.method for c in _cloud(handler).call_log() if c.method in ("stop_container", "terminate")]
    assert calls == ["stop_container", "terminate"]
    entry = handler.tracked(key)
    assert entry is not None and handler.lifecycle.until_deadline(entry) is None  # carried out once


def test_a_pod_before_its_deadline_is_looked_at_again_when_it_runs_out() -> None:
    handler, _, _ = kept_fake_handler("stopping")
    pod = _pod("early", activeDeadlineSeconds=600, status={"phase": "Running", "startTime": rfc3339(datetime.now(UTC))})
    key = adopt_provisioned(handler, pod, running=True)
    after = handler.lifecycle.carry_out(key, pod)
    assert after is not None and 590 < after <= 600
    assert not handler.lifecycle.step_due(key)


def test_a_pre_stop_exec_hook_runs_before_the_containers_sigterm() -> None:
    handler, _, _ = kept_fake_handler("stopping")
    hook = {"preStop": {"exec": {"command": ["echo", "draining"]}}}
    pod = _pod("hooked", container={"lifecycle": hook}, status={"phase": "Running"})
    key = adopt_provisioned(handler, pod, running=True)
    deleting = {**pod, "metadata": {**pod["metadata"], "deletionTimestamp": "x", "deletionGracePeriodSeconds": 10}}
    wait_for(lambda: handler.teardown.terminate(deleting) is None, what="the graceful stop, then terminate")
    calls = [c.method for c in _cloud(handler).call_log() if c.method in ("exec", "stop_container", "terminate")]
    assert calls == ["exec", "stop_container", "terminate"]
    assert handler.tracked(key) is None


class _NoStopAlone(FakeProvider):
    """A provider that cannot stop one container (RunPod with its SSH option off)."""

    def stop_container(self, instance_id: InstanceId, container: str, *, grace: float) -> None:
        raise errors.NotSupported("no SSH to signal the workload with")


def test_a_provider_that_cannot_stop_one_container_has_its_instance_terminated_without_waiting_the_grace() -> None:
    writes, events = KeptPatches(), KeptEvents()
    provider = _NoStopAlone("fake", {"cloud": f"stopping-{uuid.uuid4().hex}"})
    handler = offline_handler(provider, events=events, kube=writes)
    pod = _pod("whole", status={"phase": "Running"})
    adopt_provisioned(handler, pod, running=True)
    deleting = {**pod, "metadata": {**pod["metadata"], "deletionTimestamp": "x", "deletionGracePeriodSeconds": 600}}
    handler.teardown.terminate(deleting)  # no look is scheduled for a grace nobody can use
    assert [c.method for c in provider.cloud.call_log() if c.method == "terminate"] == ["terminate"]
    ((_, kind, reason, message),) = [told for told in events.told if told[2] == "GracefulStopNotSupported"]
    assert kind == "Warning" and "no SSH to signal the workload with" in message
    assert [told[3] for told in events.told if told[2] == "Killing"] == ["Stopping container main"]  # told once


def test_a_stop_asks_the_provider_once_and_a_grace_run_out_unseen_reads_as_sigkill() -> None:
    """Every ask is a SIGTERM on some providers (a trap would start over): `stop_container` is
    asked once however often the Pod is looked at. A container the provider still shows running
    when the grace and one poll have passed is written as the terminate leaves it: 137, Error."""
    handler, writes, _ = kept_fake_handler("stopping", {"workload": {"sigterm": "ignore"}})
    pod = _pod("stubborn", status={"phase": "Running"})
    key = adopt_provisioned(handler, pod, running=True)
    entry = handler.tracked(key)
    assert entry is not None and entry.last_instance is not None
    deleting = {**pod, "metadata": {**pod["metadata"], "deletionTimestamp": "x", "deletionGracePeriodSeconds": 1}}
    wait_for(lambda: handler.teardown.terminate(deleting) is None, timeout=15, what="the stop, then terminate")
    assert [c.method for c in _cloud(handler).call_log() if c.method == "stop_container"] == ["stop_container"]
    final = [body["status"] for path, body in writes.patches if path.endswith("/status")][-1]
    assert final["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 137


def test_killed_ends_what_still_runs_with_the_kubelets_sigkill() -> None:
    at = datetime(2026, 12, 5, 3, 0, 0, tzinfo=UTC)
    running = Instance(InstanceId("i-1"), claim_name("default", "p", "u"), InstanceState.RUNNING, at)
    gone = killed(running, at=at)
    assert (gone.state, gone.exit_code, gone.exit_reason, gone.finished_at) == (InstanceState.FAILED, 137, "Error", at)


def test_pre_stop_hooks_past_the_pools_bound_wait_their_turn_on_at_most_its_workers() -> None:
    """The bound (MAX_HOOK_WORKERS a provider; here 2): 6 hooks at once run on 2 threads, never
    more than 2 at a time, and every one runs."""
    pool = HookPool(workers=2)
    lock, running, most, done = threading.Lock(), [0], [0], threading.Semaphore(0)

    def hook() -> None:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        threading.Event().wait(0.1)
        with lock:
            running[0] -= 1
        done.release()

    for _ in range(6):
        pool.submit(hook)
    for _ in range(6):
        assert done.acquire(timeout=10)
    assert most[0] == 2 and len(pool.threads) == 2
    pool.submit(hook)  # an idle worker takes the next one: no third thread
    assert done.acquire(timeout=10) and len(pool.threads) == 2
