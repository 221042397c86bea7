"""The rig of the Pod-contract-in-time tests: one provider's virtual node (a Runner polling
every POLL seconds) on a devcluster of its own, a watch that keeps every Pod status the API
server returned (with the time it arrived), real kubectl for deletes and `get pods`, and a
manager restart (new provider objects on the same cloud state, a new Runner).

`drive` runs the scenarios of one provider at once: the WORKLOADS Pods created together, the
manager restarted in the middle of one deadline, the others deleted as a user deletes them;
the tests then read what happened. Used by tests/vnode/test_time_contract.py and
tests/vnode/test_time_details.py (the providers are built by tests/support/rigs/timeclouds.py);
nothing here is a test, and nothing it starts outlives `time_rig`.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from devcluster import DevCluster
from kube import names
from kube.client import Kube, KubeError, path_for
from providers.base import InstanceId, InstanceState, Provider
from tests.support.clients.kubectl import KUBECTL_137
from tests.support.factories import make_pod
from tests.support.fixtures import kube_for
from tests.support.polling import wait_for
from tests.support.rigs.runners import make_runner
from vnode.runner import Runner

POLL = 0.5  # seconds between the vnode's list() calls
SLACK = 2.0  # what a status write, a watch event and a busy 2-core machine add on top of one poll
DEADLINE = 5  # activeDeadlineSeconds of the deadline Pods
WORK = 15  # seconds the checkpointing workload works after SIGTERM
DEADLINE_MESSAGE = "Pod was active on the node longer than the specified deadline"
PODS = path_for("pods", namespace="default")
ENDED = frozenset({InstanceState.SUCCEEDED, InstanceState.FAILED, InstanceState.TERMINATED})

# The scenario Pods, by name -> their one container's name (the fake scripts its containers by
# name) and shell workload ({file} is the Pod's own file, on this machine, which every
# provider's containers here can write: a local process, a fake-docker process in a VM's mount
# namespace, a Modal sandbox's process, a RunPod pod's process).
LOOP = "while true; do sleep 0.2; done"
WORKLOADS = {
    "deadline-restart": ("sleeper", "exec sleep 3600"),
    "checkpoint": ("checkpointer",
                   f"trap 'echo term >> {{file}}; sleep {WORK}; echo checkpoint >> {{file}}; exit 143' TERM; {LOOP}"),
    "stubborn": ("stubborn", f"trap '' TERM; {LOOP}"),
    "hooked": ("hooked", f"trap 'echo term >> {{file}}; exit 143' TERM; {LOOP}"),
    "deadline": ("sleeper", "exec sleep 3600"),  # created after the restart
}  # fmt: skip


@dataclass(frozen=True)
class Seen:
    """One watch event: when it arrived (time.time()), its type, the Pod as it was then."""

    at: float
    kind: str
    pod: dict[str, Any]

    @property
    def status(self) -> dict[str, Any]:
        return self.pod.get("status") or {}

    @property
    def phase(self) -> str:
        return str(self.status.get("phase") or "")

    def terminated(self) -> dict[str, Any] | None:
        """The first container's terminated state, if it has one."""
        for container in self.status.get("containerStatuses") or []:
            return (container.get("state") or {}).get("terminated")
        return None


class PodWatch:
    """Every Pod event in namespace `default`, kept by Pod name in arrival order."""

    def __init__(self, kube: Kube) -> None:
        self._kube = kube
        self._seen: dict[str, list[Seen]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="time-pod-watch", daemon=True)

    def start(self) -> None:
        _, version = self._kube.list(PODS)
        self._version = version
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def history(self, name: str) -> list[Seen]:
        with self._lock:
            return list(self._seen.get(name, []))

    def all(self) -> list[Seen]:
        with self._lock:
            return [seen for pods in self._seen.values() for seen in pods]

    def first(self, name: str, test: Callable[[Seen], bool]) -> Seen | None:
        return next((seen for seen in self.history(name) if test(seen)), None)

    def gone_at(self, name: str) -> float | None:
        found = self.first(name, lambda seen: seen.kind == "DELETED")
        return None if found is None else found.at

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                for kind, obj in self._kube.watch(PODS, resource_version=self._version, timeout_seconds=5):
                    at = time.time()
                    self._version = str((obj.get("metadata") or {}).get("resourceVersion") or self._version)
                    if kind in ("ADDED", "MODIFIED", "DELETED"):
                        with self._lock:
                            self._seen.setdefault(obj["metadata"]["name"], []).append(Seen(at, kind, obj))
                    if self._stop.is_set():
                        return
            except KubeError:  # a 410 or a dropped stream: go on from the last version seen
                if self._stop.wait(0.1):
                    return


@dataclass
class TimeRig:
    """One provider's node on its own cluster. `build` makes a fresh provider object on the
    same cloud state (called at start and at every restart)."""

    cluster: DevCluster
    build: Callable[[], Provider]
    folder: Path
    kube: Kube = field(init=False)
    watch: PodWatch = field(init=False)
    provider: Provider = field(init=False)
    runner: Runner = field(init=False)
    files: bool = True  # its workloads write their files (the fake's scripted ones do not)
    restarted: tuple[float, float] | None = None  # (stop began, new Runner started), time.time()
    deleted_at: dict[str, float] = field(default_factory=dict)
    never_ran: dict[str, dict[str, Any]] = field(default_factory=dict)  # Pod name -> its last status

    def __post_init__(self) -> None:
        self.kube = kube_for(self.cluster)
        self.watch = PodWatch(kube_for(self.cluster))
        (self.folder / "files").mkdir(parents=True, exist_ok=True)

    @property
    def alias(self) -> str:
        return self.provider.name

    def start_manager(self) -> None:
        self.provider = self.build()
        self.runner = make_runner(self.cluster, self.provider, poll_interval=POLL)
        self.runner.start()

    def stop_manager(self) -> None:
        self.runner.stop(timeout=10)
        close = getattr(self.provider, "close", None)
        if close is not None:
            close()

    def restart(self) -> None:
        """The manager restarted: nothing of the old objects is kept but the cloud's state."""
        began = time.time()
        self.stop_manager()
        self.start_manager()
        self.restarted = (began, time.time())

    def file(self, pod: str) -> Path:
        return self.folder / "files" / f"{pod}.txt"

    def lines(self, pod: str) -> list[str]:
        path = self.file(pod)
        return path.read_text().splitlines() if path.exists() else []

    def pod(self, name: str, **spec: Any) -> dict[str, Any]:
        """Scenario Pod `name` (see WORKLOADS) on this node; `spec` adds to its spec."""
        container, script = WORKLOADS[name]
        pod = make_pod(name, self.alias, command=("sh", "-c", script.format(file=self.file(name))), **spec)
        pod["spec"]["containers"][0]["name"] = container
        return pod

    def kubectl(self, *args: str) -> subprocess.CompletedProcess[str]:
        kubeconfig = self.cluster.kubeconfig_path
        assert kubeconfig is not None
        env = dict(os.environ, KUBECONFIG=kubeconfig, HOME=os.path.dirname(kubeconfig))
        return subprocess.run(
            [KUBECTL_137, "--kubeconfig", kubeconfig, *args], capture_output=True, text=True, timeout=60, env=env
        )

    def delete(self, name: str, *flags: str) -> None:
        """`kubectl delete pod <name> --wait=false <flags>`, its start time kept."""
        self.deleted_at[name] = time.time()
        done = self.kubectl("delete", "pod", name, "--wait=false", *flags)
        assert done.returncode == 0, done.stderr

    def get_pods_status(self, name: str) -> str:
        """The STATUS column of `kubectl get pods <name>` (as printPod words it)."""
        done = self.kubectl("get", "pods", name, "--no-headers")
        return done.stdout.split()[2] if done.returncode == 0 and len(done.stdout.split()) > 2 else ""

    def running(self, name: str) -> Seen | None:
        return self.watch.first(name, lambda seen: seen.phase == "Running")

    def reached_running(self, name: str) -> bool:
        """Wait (up to 2 min: an instance may boot) for the Pod to be Running; False, with
        its last status kept for the test to show, if it ended or timed out first."""
        ended = ("Failed", "Succeeded")
        try:
            wait_for(lambda: self.running(name) or self.watch.first(name, lambda s: s.phase in ended), 120)
        except AssertionError:
            pass
        if self.running(name):
            return True
        history = self.watch.history(name)
        self.never_ran[name] = history[-1].status if history else {}
        return False

    def ran(self, name: str) -> None:
        """Fail the test of a scenario whose Pod never ran (drive could not start it)."""
        assert name not in self.never_ran, f"{name} never ran: {self.never_ran[name]}"

    def start_time(self, name: str) -> float:
        seen = wait_for(
            lambda: self.watch.first(name, lambda s: bool(s.status.get("startTime"))),
            60,
            what=f"{name} to have a startTime",
        )
        return datetime.fromisoformat(str(seen.status["startTime"]).replace("Z", "+00:00")).timestamp()

    def instance_of(self, name: str) -> InstanceId:
        for seen in self.watch.history(name):
            annotations = seen.pod["metadata"].get("annotations") or {}
            if annotations.get(names.INSTANCE_ID_ANNOTATION):
                return InstanceId(annotations[names.INSTANCE_ID_ANNOTATION])
        raise AssertionError(f"{name} never named its instance")

    def live(self, instance_id: InstanceId) -> bool:
        """True while the provider reports the instance running or going: gone (None),
        TERMINATED, or ended with nothing running (SUCCEEDED/FAILED: a finished Modal sandbox,
        a shut-down EC2 instance keeping its exit) is not live."""
        found = self.provider.get(instance_id)
        listed = [i for i in self.provider.list() if i.id == instance_id and i.state not in ENDED]
        return bool(listed) or (found is not None and found.state not in ENDED)

    def events(self, name: str, reason: str) -> list[dict[str, Any]]:
        items, _ = self.kube.list(path_for("events", namespace="default"), fieldSelector=f"involvedObject.name={name}")
        return [e for e in items if e.get("reason") == reason]


@contextmanager
def time_rig(folder: Path, build: Callable[[], Provider], *, files: bool = True) -> Iterator[TimeRig]:
    """A devcluster, the watch and the manager for `build`'s provider; on exit the manager
    stops and every instance still there is terminated."""
    with DevCluster(kubeconfig_path=str(folder / "kubeconfig"), scheduler_interval=0.05) as cluster:
        rig = TimeRig(cluster, build, folder, files=files)
        rig.watch.start()
        rig.start_manager()
        try:
            yield rig
        finally:
            rig.stop_manager()
            rig.watch.stop()
            cleaner = build()
            for instance in cleaner.list():
                if instance.state is not InstanceState.TERMINATED:
                    cleaner.terminate(instance.id)
            close = getattr(cleaner, "close", None)
            if close is not None:
                close()


def drive(rig: TimeRig) -> None:
    """The scenarios of one provider at once: the deadline, checkpoint, stubborn and hooked
    Pods created together; the manager restarted 2.5 s after the deadline Pod's startTime
    (in the middle of its 5 s); a second deadline Pod created after the restart; then, once
    Running, `checkpoint` deleted as is (its own 60 s grace), `stubborn` with
    `--grace-period=3`, `hooked` as is (30 s) after its preStop hook."""
    hook = {"preStop": {"exec": {"command": ["sh", "-c", f"echo prestop >> {rig.file('hooked')}"]}}}
    for pod in (
        rig.pod("deadline-restart", activeDeadlineSeconds=DEADLINE),
        rig.pod("checkpoint", terminationGracePeriodSeconds=60),
        rig.pod("stubborn"),
        rig.pod("hooked"),
    ):
        if pod["metadata"]["name"] == "hooked":
            pod["spec"]["containers"][0]["lifecycle"] = hook
        rig.kube.create(PODS, pod)
    if rig.reached_running("deadline-restart"):
        started = rig.start_time("deadline-restart")
        wait_for(lambda: time.time() >= started + 2.5, 10, interval=0.01, what="2.5 s into the deadline")
        rig.restart()
    rig.kube.create(PODS, rig.pod("deadline", activeDeadlineSeconds=DEADLINE))
    for name, flags in (("checkpoint", ()), ("stubborn", ("--grace-period=3",)), ("hooked", ())):
        if rig.reached_running(name):
            rig.delete(name, *flags)
