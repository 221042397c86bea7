"""vnode.phases.teardown's one entry point, `Teardown.terminate(pod or Tombstone)`: a Tombstone
terminates only the tracked entry of its UID; a Pod is terminated whether tracked or not (an
untracked one's claim is looked up and its instance adopted first)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from kube import billing as kbilling
from kube import names
from providers.base import ClaimName, Instance, InstanceId, InstanceState
from tests.support.factories import make_pod
from tests.support.polling import wait_for
from tests.support.rigs.offline import KeptPatches, adopt_new_pod, kept_fake_handler
from vnode.handler import Handler
from vnode.model import billing
from vnode.model.containerstatus import (
    UNLOCATED,
    UNLOCATED_AT_TERMINATION,
    UNLOCATED_WHEN_DELETED,
    unlocated_status,
)
from vnode.phases.teardown import Tombstone


def fake_handler() -> Handler:
    return kept_fake_handler("teardown")[0]


def test_a_tombstone_terminates_only_the_entry_of_its_uid() -> None:
    handler = fake_handler()
    pod = adopt_new_pod(handler, "old")
    key, uid = "default/old", pod["metadata"]["uid"]
    assert handler.teardown.terminate(Tombstone(key, uid="another-pods-uid")) is None
    entry = handler.tracked(key)
    assert entry is not None and not entry.terminate_asked  # a successor's tombstone is not this entry's
    assert handler.teardown.terminate(Tombstone(key, uid=uid)) is None  # the fake stops at once
    assert handler.tracked(key) is None
    assert all(i.state is not InstanceState.RUNNING for i in handler.provider.list())


def test_an_untracked_pod_is_looked_up_adopted_and_terminated() -> None:
    handler = fake_handler()
    pod = adopt_new_pod(handler, "cold")
    entry = handler.tracked("default/cold")
    assert entry is not None
    handler.context.tracked.forget(entry)  # a cold map, as after a restart
    assert not handler.tracks("default", "cold")
    # Its container is stopped first (SIGTERM, the fake ends it at once), then the instance goes.
    wait_for(lambda: handler.teardown.terminate(pod) is None, what="the graceful stop, then terminate")
    assert not handler.tracks("default", "cold")
    assert [c.args.split()[-1] for c in handler.provider.cloud.call_log("terminate")][-1].startswith("id=")
    assert all(i.state is not InstanceState.RUNNING for i in handler.provider.list())


def test_an_untracked_pod_without_an_instance_has_nothing_to_terminate() -> None:
    handler = fake_handler()
    pod = make_pod("never", namespace="default", uid=str(uuid.uuid4()))
    assert handler.teardown.terminate(pod) is None
    assert not handler.tracks("default", "never")


def test_a_span_the_poll_closed_meanwhile_is_written_before_the_pod_goes() -> None:
    """The race the RBAC proof caught under load (1 run in 30): while the teardown stopped the
    Pod, the poll thread saw the instance terminating and closed its billing span in memory; the
    teardown's own close then changed nothing, so it wrote nothing and forgot the entry, and the
    Pod went with its span open on it (placement settles such a Pod only after its grace and two
    minutes). Whatever of the record is unwritten is written before the Pod goes."""
    handler, kube, _ = kept_fake_handler("teardown")
    provider = handler.provider
    pod = adopt_new_pod(handler, "raced")
    entry = handler.tracked("default/raced")
    assert entry is not None and billing.current(entry).open is not None
    handler.writer.flush(entry, pod)  # the open span on the Pod, as once it runs
    kube.patches.clear()
    terminate = provider.terminate

    def terminate_as_the_poll_closes(instance_id: InstanceId) -> None:
        terminate(instance_id)
        with entry.lock:  # the poll thread's look at the terminating instance, at this moment
            billing.close(entry, None)

    provider.terminate = terminate_as_the_poll_closes  # type: ignore[method-assign]
    deleting = {**pod, "metadata": {**pod["metadata"], "deletionTimestamp": "2026-12-05T12:00:00Z"}}
    wait_for(lambda: handler.teardown.terminate(deleting) is None, what="the stop, then terminate")
    assert handler.tracked("default/raced") is None
    written = [
        body["metadata"]["annotations"][names.BILLING_ANNOTATION]
        for _, body in kube.patches
        if names.BILLING_ANNOTATION in ((body.get("metadata") or {}).get("annotations") or {})
    ]
    assert written and kbilling.parse(written[-1]).open is None, kube.patches


def _deleting(pod: dict[str, Any], status: dict[str, Any] | None = None) -> dict[str, Any]:
    meta = dict(pod["metadata"])
    meta["deletionTimestamp"] = "2026-12-05T12:00:00Z"
    return {**pod, "metadata": meta, **({"status": status} if status is not None else {})}


def _status_writes(kube: KeptPatches) -> list[dict[str, Any]]:
    return [body for path, body in kube.patches if path.endswith("/status")]


def test_a_deleted_pods_final_status_and_closed_span_are_one_write() -> None:
    """The containers' ends (seen right after the SIGTERM) and the closed billing span go in
    one PATCH of pods/status after the instance stopped: no write of their own before it."""
    handler, kube, _ = kept_fake_handler("teardown")
    pod = adopt_new_pod(handler, "ended")
    entry = handler.tracked("default/ended")
    assert entry is not None
    handler.writer.flush(entry, pod)  # Running, with its open span, as once it runs
    kube.patches.clear()
    wait_for(lambda: handler.teardown.terminate(_deleting(pod)) is None, what="the stop, then terminate")
    assert len(kube.patches) == 1, kube.patches
    [body] = _status_writes(kube)
    assert kbilling.parse(body["metadata"]["annotations"][names.BILLING_ANNOTATION]).open is None
    [container] = body["status"]["containerStatuses"]
    assert "terminated" in container["state"] and container["state"]["terminated"]["reason"] != UNLOCATED
    assert body["status"]["phase"] in ("Succeeded", "Failed")


def test_a_manager_that_died_before_the_final_write_writes_the_pods_end_as_a_kubelet_does() -> None:
    """Killed between the terminate and the write of the Pod's end: the next manager finds the
    Pod being deleted with its instance gone, and writes what a kubelet's TerminatePod writes
    for containers it can no longer find (ContainerStatusUnknown, 137; the running one's unseen
    end as lastState; Failed; not ready), with the billing span closed, in one write."""
    handler, kube, _ = kept_fake_handler("teardown", {"retention_seconds": 0})  # gone once terminated
    pod = adopt_new_pod(handler, "orphaned")
    entry = handler.tracked("default/orphaned")
    assert entry is not None and entry.instance_id is not None
    handler.writer.flush(entry, pod)
    [running] = _status_writes(kube)
    on_api = {**pod, "metadata": {**pod["metadata"], "annotations": dict(running["metadata"]["annotations"])}}
    handler.provider.terminate(entry.instance_id)  # the terminate landed; then the manager died
    handler.context.tracked.forget(entry)  # a cold map, as after a restart
    kube.patches.clear()
    assert handler.teardown.terminate(_deleting(on_api, running["status"])) is None
    assert len(kube.patches) == 1, kube.patches
    [body] = _status_writes(kube)
    status = body["status"]
    assert status["phase"] == "Failed"
    [container] = status["containerStatuses"]
    assert container["state"]["terminated"]["reason"] == UNLOCATED
    assert container["state"]["terminated"]["exitCode"] == 137
    assert container["state"]["terminated"]["message"] == UNLOCATED_AT_TERMINATION
    assert container["lastState"]["terminated"]["message"] == UNLOCATED_WHEN_DELETED
    assert container["ready"] is False
    assert all(c["status"] == "False" for c in status["conditions"] if c["type"] in ("Ready", "ContainersReady"))
    assert kbilling.parse(body["metadata"]["annotations"][names.BILLING_ANNOTATION]).open is None
    assert not handler.tracks("default", "orphaned")


def test_a_pod_whose_end_was_written_is_not_written_again_after_a_restart() -> None:
    """The write of the end landed and the manager died before the delete: the Pod reads
    terminal with its span closed, so the next manager writes nothing more of it (a terminal
    status is frozen) and lets the Pod go."""
    handler, kube, _ = kept_fake_handler("teardown")
    pod = adopt_new_pod(handler, "written")
    entry = handler.tracked("default/written")
    assert entry is not None and entry.instance_id is not None
    handler.writer.flush(entry, pod)
    with entry.lock:
        billing.close(entry, None)
    handler.writer.flush(entry, pod)
    closed = kube.patches[-1][1]["metadata"]["annotations"]
    ended = {"phase": "Succeeded", "containerStatuses": [{"name": "main", "state": {"terminated": {"exitCode": 0}}}]}
    on_api = _deleting({**pod, "metadata": {**pod["metadata"], "annotations": dict(closed)}}, ended)
    handler.provider.terminate(entry.instance_id)
    handler.context.tracked.forget(entry)
    kube.patches.clear()
    assert handler.teardown.terminate(on_api) is None
    assert kube.patches == []


def test_after_a_restart_a_deleted_pods_end_is_read_from_the_providers_terminated_record() -> None:
    """As above, but the provider still lists the terminated instance with its containers' ends
    (the fake's retention, EC2's hour): those are written, not ContainerStatusUnknown."""
    handler, kube, _ = kept_fake_handler("teardown")
    pod = adopt_new_pod(handler, "recorded")
    entry = handler.tracked("default/recorded")
    assert entry is not None and entry.instance_id is not None
    handler.writer.flush(entry, pod)
    [running] = _status_writes(kube)
    handler.provider.terminate(entry.instance_id)
    [record] = [i for i in handler.provider.list() if i.id == entry.instance_id]
    assert record.state is InstanceState.TERMINATED and record.containers
    handler.context.tracked.forget(entry)
    kube.patches.clear()
    on_api = {**pod, "metadata": {**pod["metadata"], "annotations": dict(running["metadata"]["annotations"])}}
    assert handler.teardown.terminate(_deleting(on_api, running["status"])) is None
    [body] = _status_writes(kube)
    [container] = body["status"]["containerStatuses"]
    [fact] = record.containers
    assert container["state"]["terminated"]["exitCode"] == fact.exit_code
    assert container["state"]["terminated"]["reason"] != UNLOCATED and "lastState" not in container
    assert body["status"]["phase"] == "Failed"


def test_after_a_restart_one_containers_end_is_the_exit_the_provider_read_for_its_instance() -> None:
    """A provider that reports no per-container facts (one container, the instance's facts are
    its own) but learnt the exit of the terminated instance: that exit is the container's end."""
    ended = Instance(
        InstanceId("i-9"),
        ClaimName("c"),
        InstanceState.TERMINATED,
        created_at=datetime(2026, 12, 6, tzinfo=UTC),
        started_at=datetime(2026, 12, 6, tzinfo=UTC),
        finished_at=datetime(2026, 12, 6, 0, 1, tzinfo=UTC),
        exit_code=143,
    )
    running = {"phase": "Running", "containerStatuses": [{"name": "main", "state": {"running": {}}, "ready": True}]}
    pod = make_pod("one", namespace="default", uid="u1")
    status = unlocated_status(pod, running, ended, now="2026-12-06T00:02:00Z")
    [container] = status["containerStatuses"]
    assert container["state"]["terminated"]["exitCode"] == 143
    assert container["state"]["terminated"]["reason"] == "Error" and "lastState" not in container
    assert status["phase"] == "Failed" and container["ready"] is False
    alone = unlocated_status(pod, running, None, now="2026-12-06T00:02:00Z")  # nothing known: the kubelet's word
    assert alone["containerStatuses"][0]["state"]["terminated"]["reason"] == UNLOCATED


def test_a_restart_that_finds_the_instance_still_going_writes_the_pods_end_not_running() -> None:
    """Killed between the terminate and the write of the end, while the instance still shuts
    down (EC2's shutting-down): the next manager adopts it going, waits for it to go, and then
    writes the end a kubelet writes for containers it cannot find, never `Running`."""
    handler, kube, _ = kept_fake_handler("teardown", {"termination_delay": 0.3, "retention_seconds": 0})
    pod = adopt_new_pod(handler, "going")
    entry = handler.tracked("default/going")
    assert entry is not None and entry.instance_id is not None
    handler.writer.flush(entry, pod)
    [running] = _status_writes(kube)
    handler.provider.terminate(entry.instance_id)  # landed; then the manager died
    handler.context.tracked.forget(entry)
    kube.patches.clear()
    on_api = {**pod, "metadata": {**pod["metadata"], "annotations": dict(running["metadata"]["annotations"])}}
    target = _deleting(on_api, running["status"])
    wait_for(lambda: handler.teardown.terminate(target) is None, what="the going instance gone")
    writes = _status_writes(kube)
    assert all(body["status"]["phase"] == "Failed" for body in writes), writes  # never Running
    body = writes[-1]
    [container] = body["status"]["containerStatuses"]
    assert "terminated" in container["state"] and container["ready"] is False
    assert kbilling.parse(body["metadata"]["annotations"][names.BILLING_ANNOTATION]).open is None


def test_a_pod_known_only_by_its_tombstone_gets_nothing_written_to_its_name() -> None:
    """A force-deleted Pod whose in-flight teardown forgot it is terminated from its last state;
    its name may already be a new Pod's (a StatefulSet's `web-0`), so nothing is written to it."""
    handler, kube, _ = kept_fake_handler("teardown", {"retention_seconds": 0})
    pod = adopt_new_pod(handler, "web-0")
    entry = handler.tracked("default/web-0")
    assert entry is not None and entry.instance_id is not None
    handler.writer.flush(entry, pod)
    tombstone = dict(entry.pod)  # no deletionTimestamp: force-deleted
    handler.context.tracked.forget(entry)
    kube.patches.clear()
    wait_for(lambda: handler.teardown.terminate(tombstone, gone=True) is None, what="the stop, then terminate")
    assert kube.patches == []
    assert all(i.state is not InstanceState.RUNNING for i in handler.provider.list())
    handler2, kube2, _ = kept_fake_handler("teardown", {"retention_seconds": 0})
    pod2 = adopt_new_pod(handler2, "web-0")
    entry2 = handler2.tracked("default/web-0")
    assert entry2 is not None and entry2.instance_id is not None
    handler2.provider.terminate(entry2.instance_id)  # its instance is gone already
    handler2.context.tracked.forget(entry2)
    kube2.patches.clear()
    assert handler2.teardown.terminate(dict(pod2), gone=True) is None
    assert kube2.patches == []


INIT_SPEC = {
    "initContainers": [{"name": n, "image": "busybox"} for n in ("fetch", "warm")],
    "containers": [{"name": "main", "image": "busybox"}],
}


def _cs(name: str, state: dict[str, Any], last: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"name": name, "state": state, "lastState": last or {}, "ready": False}


def test_the_kubelets_rules_for_a_pod_still_initializing_leave_what_never_started_waiting() -> None:
    """TerminatePod's two rules: app containers are ended only once the Pod initialized, and of
    the init containers all but the trailing ones with no sign of a start."""
    pod = make_pod("init", namespace="default", uid="u", spec=INIT_SPEC)
    status = {
        "phase": "Pending",
        "initContainerStatuses": [
            _cs("fetch", {"running": {}}),
            _cs("warm", {"waiting": {"reason": "PodInitializing"}}),
        ],
        "containerStatuses": [_cs("main", {"waiting": {"reason": "PodInitializing"}})],
    }
    ended = unlocated_status(pod, status, None, now="2026-12-06T00:00:00Z")
    fetch, warm = ended["initContainerStatuses"]
    assert fetch["state"]["terminated"]["reason"] == UNLOCATED and fetch["lastState"]["terminated"]
    assert "waiting" in warm["state"]  # never started: left waiting
    assert "waiting" in ended["containerStatuses"][0]["state"]  # the Pod never initialized
    assert ended["phase"] == "Failed"
    nothing_started = {
        **status,
        "initContainerStatuses": [_cs(n, {"waiting": {"reason": "PodInitializing"}}) for n in ("fetch", "warm")],
    }
    first, second = unlocated_status(pod, nothing_started, None, now="2026-12-06T00:00:00Z")["initContainerStatuses"]
    assert "terminated" in first["state"] and "waiting" in second["state"]  # the first always counts
    initialized = {
        "phase": "Running",
        "initContainerStatuses": [_cs(n, {"terminated": {"exitCode": 0}}) for n in ("fetch", "warm")],
        "containerStatuses": [_cs("main", {"running": {}})],
    }
    [main] = unlocated_status(pod, initialized, None, now="2026-12-06T00:00:00Z")["containerStatuses"]
    assert main["state"]["terminated"]["reason"] == UNLOCATED
    assert main["lastState"]["terminated"]["message"] == UNLOCATED_WHEN_DELETED
