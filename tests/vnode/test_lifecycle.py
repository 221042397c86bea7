"""The Pod contract end to end: a Runner on the embedded cluster (over HTTP) and a fake cloud.

Exits, lost instances, terminal Pods that stop billing, a cold map after a vanished instance,
credentials that survive a failed write, and an outage that costs one list per interval.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from kube import names
from kube.client import MERGE_PATCH, Kube, KubeError, path_for
from providers.fake import FakeProvider
from tests.support.factories import make_pod
from tests.support.pods import get_pod, phase_of
from tests.support.polling import wait_for
from vnode.runner import Runner

POLL = 0.2  # tests/support/rigs/runners.py RUNNER_OPTIONS


def instance_of(kube: Kube, name: str) -> str:
    pod = wait_for(lambda: get_pod(kube, name), what=f"{name} exists")
    return str(wait_for(lambda: (get_pod(kube, name) or pod)["metadata"].get("annotations", {}).get(
        names.INSTANCE_ID_ANNOTATION), what=f"{name} has an instance"))  # fmt: skip


def container(kube: Kube, name: str) -> dict[str, Any]:
    statuses = ((get_pod(kube, name) or {}).get("status") or {}).get("containerStatuses") or [{}]
    return dict(statuses[0])


def events_for(kube: Kube, name: str) -> list[dict[str, Any]]:
    events, _ = kube.list(path_for("events", namespace="default"))
    return [e for e in events if e["involvedObject"]["name"] == name]


def reasons_for(kube: Kube, name: str) -> list[str]:
    return [e["reason"] for e in events_for(kube, name)]


def test_one_list_missing_an_instance_changes_nothing(
    kube: Kube, start_runner: Callable[..., Runner], cloud_name: str
) -> None:
    """The fake cloud's `hide` fault: the next lists leave the instance out while it runs and
    `get` finds it, as EC2's late lists do."""
    provider = FakeProvider("gpu", {"cloud": cloud_name})
    start_runner(provider)
    kube.create(path_for("pods", namespace="default"), make_pod("late", "gpu", restartPolicy="Never"))
    first = instance_of(kube, "late")
    wait_for(lambda: phase_of(kube, "late") == "Running")

    def lists() -> int:
        return len(provider.cloud.call_log("list"))

    for hidden in (1, 8):  # one list without it; then eight in a row, each answered by a `get`
        provider.cloud.hide(first, count=hidden)
        start = lists()
        until = start + hidden + 2
        wait_for(lambda until=until: not provider.cloud.faults() and lists() >= until, what="the lists, and two more")
        assert phase_of(kube, "late") == "Running" and instance_of(kube, "late") == first
        assert names.EVENT_INSTANCE_LOST not in reasons_for(kube, "late")
    assert len(provider.cloud.call_log("provision")) == 1


def test_exit_0_and_exit_3_give_succeeded_and_failed_with_the_code(
    kube: Kube, start_runner: Callable[..., Runner], cloud_name: str
) -> None:
    provider = FakeProvider("gpu", {"cloud": cloud_name})
    start_runner(provider)
    for name in ("ok", "bad"):
        kube.create(path_for("pods", namespace="default"), make_pod(name, "gpu", restartPolicy="Never"))
    for name, code in (("ok", 0), ("bad", 3)):
        wait_for(lambda name=name: phase_of(kube, name) == "Running")  # type: ignore[misc]
        provider.cloud.exit(instance_of(kube, name), code=code)
    wait_for(lambda: phase_of(kube, "ok") == "Succeeded" and phase_of(kube, "bad") == "Failed")
    for name, code, reason in (("ok", 0, "Completed"), ("bad", 3, "Error")):
        terminated = container(kube, name)["state"]["terminated"]
        assert (terminated["exitCode"], terminated["reason"]) == (code, reason)
        assert terminated["finishedAt"] and container(kube, name)["restartCount"] == 0


def test_a_terminal_pods_instance_is_terminated_and_the_pod_object_stays(
    kube: Kube, start_runner: Callable[..., Runner], cloud_name: str
) -> None:
    provider = FakeProvider("gpu", {"cloud": cloud_name})
    start_runner(provider)
    kube.create(path_for("pods", namespace="default"), make_pod("done", "gpu", restartPolicy="OnFailure"))
    wait_for(lambda: phase_of(kube, "done") == "Running")
    instance = instance_of(kube, "done")
    provider.cloud.exit(instance, code=0)
    wait_for(lambda: phase_of(kube, "done") == "Succeeded")
    terminated = wait_for(lambda: provider.cloud.call_log("terminate"), what="the finished instance is terminated")
    assert [record.args.split()[-1] for record in terminated] == [f"id={instance}"]  # once, and only it
    wait_for(lambda: names.EVENT_TERMINATED in reasons_for(kube, "done"), what="the TERMINATED Event")
    assert get_pod(kube, "done") is not None  # as with a kubelet: its owner or a person deletes it


def test_a_cold_map_after_a_vanished_instance_never_reruns_a_never_pod(
    kube: Kube, start_runner: Callable[..., Runner], cloud_name: str
) -> None:
    first = start_runner(FakeProvider("gpu", {"cloud": cloud_name}))
    kube.create(path_for("pods", namespace="default"), make_pod("once", "gpu", restartPolicy="Never"))
    wait_for(lambda: phase_of(kube, "once") == "Running")
    instance = instance_of(kube, "once")
    first.stop(timeout=5)
    provider = FakeProvider("gpu", {"cloud": cloud_name})
    provider.cloud.lose(instance, vanish=True)  # gone while no manager watched
    start_runner(provider)
    wait_for(lambda: phase_of(kube, "once") == "Failed")
    pod = get_pod(kube, "once") or {}
    assert pod["status"]["reason"] == names.REASON_INSTANCE_LOST and instance in pod["status"]["message"]
    assert len(provider.cloud.call_log("provision")) == 1  # never provisioned again
    wait_for(lambda: names.EVENT_INSTANCE_LOST in reasons_for(kube, "once"), what="the INSTANCE_LOST Event")


def test_a_cold_map_after_a_vanished_instance_restarts_an_always_pod_and_counts_it(
    kube: Kube, start_runner: Callable[..., Runner], cloud_name: str
) -> None:
    first = start_runner(FakeProvider("gpu", {"cloud": cloud_name}))
    kube.create(path_for("pods", namespace="default"), make_pod("again", "gpu"))
    wait_for(lambda: phase_of(kube, "again") == "Running")
    instance = instance_of(kube, "again")
    first.stop(timeout=5)
    provider = FakeProvider("gpu", {"cloud": cloud_name})
    provider.cloud.lose(instance, vanish=True)
    start_runner(provider)
    wait_for(
        lambda: container(kube, "again").get("restartCount") == 1 and "running" in container(kube, "again")["state"]
    )
    assert instance_of(kube, "again") != instance
    assert container(kube, "again")["lastState"]["terminated"]["reason"] == names.REASON_INSTANCE_LOST
    wait_for(lambda: {names.EVENT_INSTANCE_LOST, names.EVENT_RESTARTING} <= set(reasons_for(kube, "again")))


class FailingOnce(Kube):
    """The runner's API client, whose first write of a Pod's annotations fails like a
    dropped connection: the credential minted meanwhile must not be lost."""

    def __init__(self, inner: Kube) -> None:
        self.__dict__.update(inner.__dict__)
        self.failed = False

    def patch(self, path: str, patch: Mapping[str, Any], *, content_type: str = MERGE_PATCH) -> dict[str, Any]:
        annotations = "annotations" in (patch.get("metadata") or {})
        if annotations and not self.failed and "/pods/" in path:
            self.failed = True
            raise KubeError(503, "ServiceUnavailable", "injected: the API server dropped the connection")
        return super().patch(path, patch, content_type=content_type)


def test_a_credential_survives_a_failed_patch(kube: Kube, start_runner: Callable[..., Runner], cloud_name: str) -> None:
    provider = FakeProvider("gpu", {"cloud": cloud_name})
    runner_kube = FailingOnce(kube)
    start_runner(provider, kube=runner_kube)
    kube.create(path_for("pods", namespace="default"), make_pod("keyed", "gpu"))
    # The Secret is written before the Pod's annotations: wait for the patch to have failed
    # and then to have been written again, not only for the Secret.
    wait_for(lambda: runner_kube.failed, what="the first annotations patch failed")
    wait_for(
        lambda: names.INSTANCE_ID_ANNOTATION
        in (get_pod(kube, "keyed") or {}).get("metadata", {}).get("annotations", {}),
        what="the annotations written after the failed patch",
    )
    secret = kube.get(path_for("secrets", namespace="default", name="keyed-connect"))
    assert set(secret["data"]) == {"token"}
    assert len(provider.cloud.call_log("provision")) == 1


def test_a_provider_outage_during_a_restart_costs_one_list_per_interval_and_recovery_one_interval(
    kube: Kube, start_runner: Callable[..., Runner], cloud_name: str
) -> None:
    first = start_runner(FakeProvider("gpu", {"cloud": cloud_name}))
    pods = [f"out-{i}" for i in range(6)]
    for name in pods:
        kube.create(path_for("pods", namespace="default"), make_pod(name, "gpu"))
    wait_for(lambda: all(phase_of(kube, n) == "Running" for n in pods))
    first.stop(timeout=5)
    provider = FakeProvider("gpu", {"cloud": cloud_name})
    provider.cloud.outage()
    before = len(provider.cloud.call_log("list"))
    started = time.monotonic()
    runner = start_runner(provider)
    wait_for(lambda: len(provider.cloud.call_log("list")) - before >= 8, what="eight poll intervals of outage")
    elapsed = time.monotonic() - started
    lists = len(provider.cloud.call_log("list")) - before
    # The poll tick's list, and every waiting Pod's lookup, share one attempt per interval.
    assert lists <= elapsed / POLL + 2, (lists, elapsed)
    assert all(runner.handler.tracked(f"default/{n}") is None for n in pods)  # nothing guessed
    outage_over = len(provider.cloud.call_log("list"))
    provider.cloud.clear()
    wait_for(lambda: all(runner.handler.tracked(f"default/{n}") is not None for n in pods))
    # Taken up by the first list that succeeds (a second if a worker's lookup raced it).
    assert len(provider.cloud.call_log("list")) - outage_over <= 3
    assert len(provider.cloud.call_log("provision")) == len(pods)  # only the first runner's
    assert all(phase_of(kube, n) == "Running" for n in pods)


def test_deleting_pods_whose_instances_stop_slowly_costs_bounded_calls(
    kube: Kube, start_runner: Callable[..., Runner], cloud_name: str
) -> None:
    provider = FakeProvider("gpu", {"cloud": cloud_name, "scenario": {"termination_delay": 4.0}})
    start_runner(provider, poll_interval=1.0)
    pods = [f"slow-{i}" for i in range(3)]
    for name in pods:
        kube.create(path_for("pods", namespace="default"), make_pod(name, "gpu"))
    wait_for(lambda: all(phase_of(kube, n) == "Running" for n in pods))
    before = {m: len(provider.cloud.call_log(m)) for m in ("terminate", "get")}
    for name in pods:
        kube.delete(path_for("pods", namespace="default", name=name))
    wait_for(lambda: all(get_pod(kube, n) is None for n in pods), timeout=60)
    terminates = len(provider.cloud.call_log("terminate")) - before["terminate"]
    gets = len(provider.cloud.call_log("get")) - before["get"]
    assert terminates == len(pods)  # asked once each
    # Looks back off from 0.5 s to the poll interval: about five in four seconds, not eight, and
    # one saw the graceful stop end; a wake-up (an Event, a status write) before a look is due
    # does not look again.
    assert gets <= len(pods) * 7, "\n".join(f"{r.at:.2f} {r.args}" for r in provider.cloud.call_log("get"))
