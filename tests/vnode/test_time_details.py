"""The last status details a kubelet writes, end to end on the local and the fake provider
(tests/support/rigs/timebound.py): an env var from a missing Secret reads
`CreateContainerConfigError` in `kubectl get pods` until the Secret exists, and a Pod whose
workload finished reads `Succeeded` before its instance is terminated, never `Running` after
its container ended (the fake's terminate slowed to TERMINATE_LATENCY seconds)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime

import pytest

from kube.client import path_for
from providers.base import InstanceState
from providers.fake import FakeProvider
from tests.support.polling import wait_for
from tests.support.rigs.timebound import PODS, POLL, SLACK, Seen, TimeRig, time_rig
from tests.support.rigs.timeclouds import fake_cloud, local_cloud

pytestmark = pytest.mark.slow

TERMINATE_LATENCY = 4.0  # seconds each of the fake's terminate calls takes
SECRET = "late-token"
RUN = 2  # seconds the finishing workload runs
RETRY = 5.0  # seconds from the Secret's creation to Running: one retry (a provision) and its status


@pytest.fixture(scope="module", params=["local", "fake"])
def rig(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TimeRig]:
    folder = tmp_path_factory.mktemp(f"time-details-{request.param}")
    if request.param == "local":
        cloud = local_cloud(folder)
    else:
        scenario = {
            "api_latency": {"terminate": TERMINATE_LATENCY},
            "workload": {"containers": {"finisher": {"run_seconds": RUN}}},
        }
        cloud = fake_cloud(scenario=scenario)
    with cloud as build, time_rig(folder, build, files=request.param == "local") as running:
        yield running


def seconds(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def waiting_of(seen: Seen) -> dict[str, str]:
    for container in seen.status.get("containerStatuses") or []:
        return dict((container.get("state") or {}).get("waiting") or {})
    return {}


def test_a_missing_env_secret_reads_create_container_config_error_until_the_secret_is_created(rig: TimeRig) -> None:
    env = [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": SECRET, "key": "token"}}}]
    pod = rig.pod("deadline")  # a sleeper; no deadline
    pod["metadata"]["name"] = "needs-secret"
    pod["spec"]["containers"][0]["env"] = env
    rig.kube.create(PODS, pod)
    wait_for(lambda: rig.get_pods_status("needs-secret") == "CreateContainerConfigError", 30, what="kubectl's STATUS")
    config_error = "CreateContainerConfigError"
    last: Seen = wait_for(
        lambda: rig.watch.first("needs-secret", lambda s: waiting_of(s).get("reason") == config_error),
        10,
        what="the status in the watch",
    )  # the watch may trail kubectl's GET
    assert last.phase == "Pending"
    assert waiting_of(last) == {"reason": "CreateContainerConfigError", "message": f'secret "{SECRET}" not found'}
    conditions = {c["type"]: (c["status"], c.get("reason")) for c in last.status.get("conditions") or []}
    assert conditions["Ready"] == ("False", "ContainersNotReady")
    assert conditions["ContainersReady"] == ("False", "ContainersNotReady")
    events = wait_for(lambda: rig.events("needs-secret", "Failed"), 10, what="the Failed Event")
    assert [(e["type"], e["message"]) for e in events] == [("Warning", f'Error: secret "{SECRET}" not found')]

    created = rig.kube.create(
        path_for("secrets", namespace="default"), {"metadata": {"name": SECRET}, "stringData": {"token": "t0ken"}}
    )
    assert created
    at = time.time()
    running: Seen = wait_for(lambda: rig.running("needs-secret"), 30, what="Running once the Secret exists")
    assert running.at - at <= RETRY, running.at - at  # the Secret's appearance re-queues the Pod: no back-off
    assert running.status.get("hostIP") == "127.0.0.1"


def test_a_finished_pod_reads_succeeded_before_its_instance_is_terminated_never_running_after(rig: TimeRig) -> None:
    pod = rig.pod("deadline", restartPolicy="Never")
    pod["metadata"]["name"] = "finisher"
    pod["spec"]["containers"][0].update(name="finisher", command=["sh", "-c", f"sleep {RUN}"])
    rig.kube.create(PODS, pod)
    done: Seen = wait_for(lambda: rig.watch.first("finisher", lambda s: s.phase == "Succeeded"), 60, what="Succeeded")
    history = rig.watch.history("finisher")
    ended = next(seen for seen in history if seen.terminated() is not None or seen.phase in ("Succeeded", "Failed"))
    assert ended.phase == "Succeeded"  # the first status that shows the container ended
    assert not [seen for seen in history[history.index(ended) :] if seen.phase == "Running"]
    terminated = done.terminated()
    assert terminated is not None and terminated["exitCode"] == 0
    finished = seconds(terminated["finishedAt"]) + 1  # finishedAt is written to the second
    assert done.at <= finished + POLL + SLACK, done.at - finished
    instance = rig.instance_of("finisher")
    if not isinstance(rig.provider, FakeProvider):  # a local instance that ended costs nothing: it may stay
        found = rig.provider.get(instance)
        assert found is None or found.state in (InstanceState.SUCCEEDED, InstanceState.TERMINATED)
        return
    # Terminated (the fake bills a finished instance), the slow call served only after Succeeded was written.
    cloud = rig.provider.cloud
    ours = f"id={instance}"
    calls = wait_for(lambda: [c for c in cloud.call_log("terminate") if ours in c.args.split()], 30, what="terminate")
    assert done.at < calls[0].at
