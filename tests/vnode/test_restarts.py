"""restartPolicy end to end: Always, OnFailure and Never on the fake cloud (in place, and by a
new instance when the provider cannot restart in place) and on real local processes, with the
kubelet's back-off (shortened), restartCount, lastState and the previous run's logs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from kube import names
from kube.client import Kube, path_for
from providers.base import InstanceId, LogOptions
from providers.fake import FakeProvider
from providers.local import LocalProvider
from tests.support.factories import make_pod
from tests.support.pods import get_pod, phase_of
from tests.support.polling import wait_for
from vnode.model.runs import BackoffPolicy
from vnode.runner import Runner

QUICK = BackoffPolicy(initial=0.4, maximum=1.6, reset=600.0)


def container(kube: Kube, name: str) -> dict[str, Any]:
    statuses = ((get_pod(kube, name) or {}).get("status") or {}).get("containerStatuses") or [{}]
    return dict(statuses[0])


def instance_id(kube: Kube, name: str) -> str:
    return str(((get_pod(kube, name) or {}).get("metadata") or {}).get("annotations", {}).get(
        names.INSTANCE_ID_ANNOTATION, ""))  # fmt: skip


def reasons_for(kube: Kube, name: str) -> list[str]:
    events, _ = kube.list(path_for("events", namespace="default"))
    return [e["reason"] for e in events if e["involvedObject"]["name"] == name]


def read_logs(runner: Runner, name: str, *, previous: bool = False) -> bytes:
    stream = runner.handler.serving.get_container_logs("default", name, "main", LogOptions(previous=previous))
    chunks = []
    while chunk := stream.read():
        chunks.append(chunk)
    stream.close()
    return b"".join(chunks)


def crashing_fake(cloud_name: str, *, in_place: bool = True, code: int = 1) -> FakeProvider:
    scenario = {"workload": {"run_seconds": 0.3, "exit_code": code}}
    return FakeProvider("gpu", {"cloud": cloud_name, "scenario": scenario, "restarts_in_place": in_place})


def test_always_restarts_in_place_with_the_back_off_and_counts_each_restart(
    kube: Kube, start_runner: Callable[..., Runner], cloud_name: str
) -> None:
    provider = crashing_fake(cloud_name)
    start_runner(provider, backoff=QUICK)
    kube.create(path_for("pods", namespace="default"), make_pod("loop", "gpu"))
    first = wait_for(lambda: instance_id(kube, "loop"))
    backing_off = wait_for(
        lambda: (c := container(kube, "loop")).get("state", {}).get("waiting", {}).get("reason") == "CrashLoopBackOff"
        and c,
        what="the container waits in CrashLoopBackOff",
    )
    assert "restarting failed container=main pod=loop_default(" in backing_off["state"]["waiting"]["message"]
    assert backing_off["lastState"]["terminated"]["exitCode"] == 1 and phase_of(kube, "loop") == "Running"
    wait_for(lambda: container(kube, "loop").get("restartCount", 0) >= 3, what="three restarts")
    assert instance_id(kube, "loop") == first  # in place: the same instance
    assert len(provider.cloud.call_log("provision")) == 1
    wait_for(lambda: {names.EVENT_BACKOFF, names.EVENT_STARTED} <= set(reasons_for(kube, "loop")))
    restarts = [r.at for r in provider.cloud.call_log("restart")]
    gaps = [later - earlier for earlier, later in zip(restarts, restarts[1:], strict=False)]
    # Each later restart waits at least its back-off after the run before it ended (0.3 s runs).
    assert all(gap >= 0.3 + QUICK.initial * 0.9 for gap in gaps), gaps


def test_on_failure_does_not_run_a_success_again_and_releases_its_instance(
    kube: Kube, start_runner: Callable[..., Runner], cloud_name: str
) -> None:
    provider = crashing_fake(cloud_name, code=0)
    start_runner(provider, backoff=QUICK)
    kube.create(path_for("pods", namespace="default"), make_pod("once", "gpu", restartPolicy="OnFailure"))
    wait_for(lambda: phase_of(kube, "once") == "Succeeded")
    assert container(kube, "once")["restartCount"] == 0
    wait_for(lambda: provider.cloud.call_log("terminate"), what="the finished instance is released")
    assert not provider.cloud.call_log("restart")


def test_on_failure_restarts_a_failure_and_never_never_reruns(
    kube: Kube, start_runner: Callable[..., Runner], cloud_name: str
) -> None:
    provider = crashing_fake(cloud_name, code=3)
    start_runner(provider, backoff=QUICK)
    kube.create(path_for("pods", namespace="default"), make_pod("retry", "gpu", restartPolicy="OnFailure"))
    kube.create(path_for("pods", namespace="default"), make_pod("never", "gpu", restartPolicy="Never"))
    wait_for(lambda: container(kube, "retry").get("restartCount", 0) >= 1)
    wait_for(lambda: phase_of(kube, "never") == "Failed")
    terminated = container(kube, "never")["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (3, "Error")
    never = instance_id(kube, "never")
    assert not any(record.args.endswith(f"id={never}") for record in provider.cloud.call_log("restart"))
    assert len(provider.cloud.call_log("provision")) == 2 and container(kube, "never")["restartCount"] == 0


def test_a_provider_that_cannot_restart_in_place_gets_a_new_instance_per_restart(
    kube: Kube, start_runner: Callable[..., Runner], cloud_name: str
) -> None:
    provider = crashing_fake(cloud_name, in_place=False)
    start_runner(provider, backoff=QUICK)
    kube.create(path_for("pods", namespace="default"), make_pod("vm", "gpu"))
    first = wait_for(lambda: instance_id(kube, "vm"))
    wait_for(lambda: container(kube, "vm").get("restartCount", 0) >= 2, what="two restarts")
    assert instance_id(kube, "vm") != first
    terminated = [record.args for record in provider.cloud.call_log("terminate")]
    assert any(args.endswith(f"id={first}") for args in terminated)  # the old one goes first
    assert len(provider.cloud.call_log("provision")) >= 3
    wait_for(lambda: names.EVENT_RESTARTING in reasons_for(kube, "vm"), what="the RESTARTING Event")


def test_local_processes_restart_in_place_and_serve_the_previous_runs_logs(
    kube: Kube, start_runner: Callable[..., Runner], tmp_path: Path
) -> None:
    provider = LocalProvider("box", {"state_dir": str(tmp_path / "state"), "grace_period": 1})
    runner = start_runner(provider, backoff=QUICK)
    counter = tmp_path / "runs"
    script = f'n=$(cat {counter} 2>/dev/null || echo 0); n=$((n+1)); echo $n > {counter}; echo "run $n"; exit 3'
    try:
        kube.create(path_for("pods", namespace="default"), make_pod("local-loop", "box", command=("sh", "-c", script)))
        wait_for(lambda: container(kube, "local-loop").get("restartCount", 0) >= 2, what="two restarts")
        restarts = container(kube, "local-loop")["restartCount"]
        previous = read_logs(runner, "local-loop", previous=True)
        assert previous.strip().startswith(b"run ") and int(previous.split()[1]) >= restarts - 1
        assert container(kube, "local-loop")["lastState"]["terminated"]["exitCode"] == 3
    finally:
        for instance in provider.list():
            provider.terminate(instance.id)


def test_exit_0_and_exit_3_of_local_processes_give_succeeded_and_failed(
    kube: Kube, start_runner: Callable[..., Runner], tmp_path: Path
) -> None:
    provider = LocalProvider("box", {"state_dir": str(tmp_path / "state"), "grace_period": 1})
    runner = start_runner(provider, backoff=QUICK)
    for name, code in (("l-ok", 0), ("l-bad", 3)):
        pod = make_pod(name, "box", command=("sh", "-c", f"echo bye; exit {code}"), restartPolicy="Never")
        kube.create(path_for("pods", namespace="default"), pod)
    wait_for(lambda: phase_of(kube, "l-ok") == "Succeeded" and phase_of(kube, "l-bad") == "Failed")
    assert container(kube, "l-bad")["state"]["terminated"]["exitCode"] == 3
    assert container(kube, "l-ok")["state"]["terminated"]["reason"] == "Completed"
    assert read_logs(runner, "l-ok") == b"bye\n"  # a completed Pod's logs are still served


class PollingDuringRestart(FakeProvider):
    """A fake whose `restart` lets the poll tick run before it returns: the tick the poll
    thread may run between the provider's answer and the vnode's record of the restart."""

    runner: Runner | None = None

    def restart(self, instance_id: InstanceId, container: str = "") -> None:
        super().restart(instance_id, container)
        if self.runner is not None:
            self.runner.handler.status_sync.poll_once()


def test_a_run_that_ends_before_its_restart_is_recorded_is_restarted_all_the_same(
    kube: Kube, start_runner: Callable[..., Runner], cloud_name: str
) -> None:
    """The new run (which exits at once) is seen ending by a tick that lands inside the
    restart; recording the restart must not swallow that end, or the Pod stops restarting."""
    scenario = {"poll_interval": 0.2, "workload": {"run_seconds": 0, "exit_code": 3}}
    provider = PollingDuringRestart("gpu", {"cloud": cloud_name, "scenario": scenario})
    provider.runner = start_runner(provider, backoff=QUICK)
    kube.create(path_for("pods", namespace="default"), make_pod("quick-exit", "gpu"))
    wait_for(lambda: container(kube, "quick-exit").get("restartCount", 0) >= 3, what="three restarts")
    assert container(kube, "quick-exit")["lastState"]["terminated"]["exitCode"] == 3
