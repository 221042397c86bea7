"""Each container's own runs (vnode.model.runs through assess.observe): its restart policy, its
back-off, its restartCount, the kubelet's Started/BackOff Events, and assess.reassess."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from kube import names
from providers.base import ClaimName, Instance, InstanceId, InstanceState
from providers.shape import ContainerFacts, ContainerState
from vnode.model import assess
from vnode.model.probestate import run_of
from vnode.model.runs import BackoffPolicy, Ending, Rules, Step, container_policy
from vnode.model.status import Verdicts
from vnode.model.tracking import Tracked, TrackedMap

NOW = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)
RULES = Rules(in_place=True, bills=False, backoff=BackoffPolicy(initial=10.0, maximum=300.0, reset=600.0))
W, R, T = ContainerState.WAITING, ContainerState.RUNNING, ContainerState.TERMINATED


def make_pod(policy: str = "Always", *, sidecar: bool = False, **probes: dict[str, Any]) -> dict[str, Any]:
    inits: list[dict[str, Any]] = [{"name": "setup", "image": "busybox"}]
    if sidecar:
        inits.append({"name": "proxy", "image": "busybox", "restartPolicy": "Always"})
    apps: list[dict[str, Any]] = [{"name": "web", "image": "busybox"}, {"name": "worker", "image": "busybox"}]
    for container in inits + apps:
        container.update(probes.get(container["name"], {}))
    return {
        "metadata": {"name": "p", "namespace": "default", "uid": "u1"},
        "spec": {"restartPolicy": policy, "initContainers": inits, "containers": apps},
        "status": {},
    }


class Script:
    """The facts a provider that runs several containers would report, moved by the test."""

    def __init__(self, *names_: str) -> None:
        self.facts = {name: ContainerFacts(name, W) for name in names_}
        self.runs = 1

    def start(self, name: str, at: int = 0) -> Instance:
        old = self.facts[name]
        self.facts[name] = ContainerFacts(name, R, started_at=NOW + timedelta(seconds=at), runs=old.runs + 1)
        self.runs += 1
        return self.instance()

    def end(self, name: str, code: int, at: int = 1) -> Instance:
        old = self.facts[name]
        self.facts[name] = ContainerFacts(name, T, started_at=old.started_at, finished_at=NOW + timedelta(seconds=at),
                                          exit_code=code, runs=old.runs)  # fmt: skip
        return self.instance()

    def instance(self) -> Instance:
        states = {f.state for f in self.facts.values()}
        state = InstanceState.RUNNING if R in states else InstanceState.SUCCEEDED
        return Instance(InstanceId("i-1"), ClaimName("c"), state, NOW, started_at=NOW, runs=self.runs,
                        containers=tuple(self.facts.values()))  # fmt: skip


def judge(entry: Tracked, container: str, ready: bool) -> None:
    """The prober's readiness verdict on `container`, for the run the entry's last facts show."""
    old = entry.probe_verdicts
    run = run_of(entry.last_instance, container, first=entry.container)
    entry.probe_verdicts = Verdicts(ready={**old.ready, container: ready}, runs={**old.runs, container: run})


def running(pod: dict[str, Any], *, rules: Rules = RULES) -> tuple[Tracked, Script]:
    """`pod` (containers setup, web, worker) tracked with its init container done and both app
    containers running, as observed under `rules`."""
    entry, script = tracked(pod), Script("setup", "web", "worker")
    script.start("setup")
    script.end("setup", 0)
    script.start("web")
    assess.observe(entry, script.start("worker"), now=NOW, at=0.0, rules=rules)
    return entry, script


def probed_web() -> tuple[Tracked, Script]:
    """`running`, with a readiness probe on `web` (no verdict yet)."""
    return running(make_pod("Always", web={"readinessProbe": {"httpGet": {"port": 80}}}))


def tracked(pod: dict[str, Any]) -> Tracked:
    entry = TrackedMap().track(pod)
    entry.instance_id = InstanceId("i-1")
    return entry


def container(entry: Tracked, name: str) -> dict[str, Any]:
    assert entry.desired_status is not None
    statuses = entry.desired_status.get("initContainerStatuses", []) + entry.desired_status["containerStatuses"]
    return dict(next(s for s in statuses if s["name"] == name))


def told(entry: Tracked, reason: str) -> list[str]:
    return [message for _, said, message in entry.events if said == reason]


@pytest.mark.parametrize(
    ("pod_policy", "init", "sidecar", "policy"),
    [("Always", False, False, "Always"), ("Never", False, False, "Never"), ("Always", True, False, "OnFailure"),
     ("OnFailure", True, False, "OnFailure"), ("Never", True, False, "Never"), ("Never", True, True, "Always")],
)  # fmt: skip
def test_each_container_lives_by_its_own_restart_policy(
    pod_policy: str, init: bool, sidecar: bool, policy: str
) -> None:
    assert container_policy(pod_policy, init=init, sidecar=sidecar) == policy


def test_a_failed_init_container_restarts_at_once_then_waits_its_back_off_in_crash_loop() -> None:
    entry, script = tracked(make_pod("Always")), Script("setup", "web", "worker")
    assess.observe(entry, script.start("setup"), now=NOW, at=0.0, rules=RULES)
    assess.observe(entry, script.end("setup", 1), now=NOW, at=1.0, rules=RULES)
    runs = entry.containers["setup"]
    assert runs.due is not None and (runs.due.step, runs.due.at) == (Step.RESTART, 1.0)
    assert entry.due_containers(1.0) == ["setup"] and entry.next_due() == 1.0
    assert container(entry, "setup")["state"]["terminated"]["exitCode"] == 1  # restarts at once: shows its exit
    runs.restarted(new_run=2, policy=RULES.backoff)  # what vnode.phases.lifecycle does after restart(container="setup")
    assess.observe(entry, script.start("setup", 2), now=NOW, at=2.0, rules=RULES)
    assess.observe(entry, script.end("setup", 1, 3), now=NOW, at=3.0, rules=RULES)
    setup = container(entry, "setup")
    assert setup["state"]["waiting"] == {
        "reason": "CrashLoopBackOff",
        "message": "back-off 10s restarting failed container=setup pod=p_default(u1)",
    }
    assert setup["restartCount"] == 1 and setup["lastState"]["terminated"]["exitCode"] == 1
    assert entry.desired_status is not None and entry.desired_status["phase"] == "Pending"
    assert entry.next_due() == 13.0
    assert told(entry, names.EVENT_BACKOFF) == ["Back-off restarting failed container setup in pod p_default(u1)"]
    assert told(entry, names.EVENT_STARTED) == ["Started container setup"] * 2


def test_a_failed_init_container_under_never_fails_the_pod_and_nothing_runs_again() -> None:
    entry, script = tracked(make_pod("Never")), Script("setup", "web", "worker")
    assess.observe(entry, script.start("setup"), now=NOW, at=0.0, rules=RULES)
    assess.observe(entry, script.end("setup", 2), now=NOW, at=1.0, rules=RULES)
    assert entry.desired_status is not None and entry.desired_status["phase"] == "Failed"
    assert entry.runs.finished and entry.next_due() is None
    assert not assess.observe(entry, script.instance(), now=NOW, at=2.0, rules=RULES), "a finished Pod is frozen"


def test_each_app_container_counts_its_own_restarts() -> None:
    entry, script = running(make_pod("Always"))
    assess.observe(entry, script.end("worker", 3), now=NOW, at=1.0, rules=RULES)
    assert entry.due_containers(1.0) == ["worker"]
    entry.containers["worker"].restarted(new_run=2, policy=RULES.backoff)
    assess.observe(entry, script.start("worker", 2), now=NOW, at=2.0, rules=RULES)
    assert (container(entry, "worker")["restartCount"], container(entry, "web")["restartCount"]) == (1, 0)
    assert container(entry, "worker")["lastState"]["terminated"]["exitCode"] == 3
    assert entry.desired_status is not None and entry.desired_status["phase"] == "Running"
    started = ["Started container setup", "Started container web", "Started container worker"]
    assert sorted(told(entry, names.EVENT_STARTED)) == [*started, "Started container worker"]


def test_facts_read_before_a_container_restart_are_ignored() -> None:
    entry, script = tracked(make_pod("Always")), Script("setup", "web", "worker")
    assess.observe(entry, script.start("setup"), now=NOW, at=0.0, rules=RULES)
    before = script.end("setup", 1)
    assess.observe(entry, before, now=NOW, at=1.0, rules=RULES)
    entry.containers["setup"].restarted(new_run=2, policy=RULES.backoff)
    late = Instance(before.id, before.claim, before.state, NOW, runs=before.runs, containers=before.containers,
                    message="a list read before the restart")  # fmt: skip
    assert not assess.observe(entry, late, now=NOW, at=1.5, rules=RULES)
    assert assess.observe(entry, script.start("setup", 2), now=NOW, at=2.0, rules=RULES)


def test_a_sidecar_restarts_while_the_apps_run_and_stops_for_good_once_they_finished() -> None:
    entry, script = tracked(make_pod("Never", sidecar=True)), Script("setup", "proxy", "web", "worker")
    script.start("setup")
    script.end("setup", 0)
    script.start("proxy")
    script.start("web")
    assess.observe(entry, script.start("worker"), now=NOW, at=0.0, rules=RULES)
    assess.observe(entry, script.end("proxy", 1), now=NOW, at=1.0, rules=RULES)
    assert entry.due_containers(1.0) == ["proxy"], "a sidecar always restarts, even under Never"
    entry.containers["proxy"].restarted(new_run=2, policy=RULES.backoff)
    assess.observe(entry, script.start("proxy", 2), now=NOW, at=2.0, rules=RULES)
    script.end("web", 0)
    assess.observe(entry, script.end("worker", 0), now=NOW, at=3.0, rules=RULES)
    assert entry.desired_status is not None and entry.desired_status["phase"] == "Running"  # the sidecar still runs
    assess.observe(entry, script.end("proxy", 143, 4), now=NOW, at=4.0, rules=RULES)  # the provider stopped it
    assert entry.desired_status["phase"] == "Succeeded" and entry.next_due() is None
    assert container(entry, "proxy")["restartCount"] == 1


def test_a_finished_pod_whose_instance_bills_is_released() -> None:
    billing = Rules(in_place=True, bills=True, backoff=RULES.backoff)
    entry, script = tracked(make_pod("OnFailure")), Script("setup", "web", "worker")
    script.start("setup")
    script.end("setup", 0)
    script.start("web")
    script.start("worker")
    script.end("web", 0)
    assess.observe(entry, script.end("worker", 0), now=NOW, at=5.0, rules=billing)
    assert entry.desired_status is not None and entry.desired_status["phase"] == "Succeeded"
    assert entry.runs.due is not None and (entry.runs.due.step, entry.runs.due.at) == (Step.RELEASE, 5.0)


def test_without_restarts_in_place_a_crashed_container_replaces_the_instance() -> None:
    replacing = Rules(in_place=False, bills=True, backoff=RULES.backoff)
    entry, script = tracked(make_pod("Always")), Script("setup", "web", "worker")
    assess.observe(entry, script.start("setup"), now=NOW, at=0.0, rules=replacing)
    assess.observe(entry, script.end("setup", 1), now=NOW, at=1.0, rules=replacing)
    assert entry.due_containers(1.0) == []
    assert entry.runs.due is not None and entry.runs.due.step is Step.REPLACE
    cause = entry.runs.ended
    entry.runs.restarted(new_run=1, policy=replacing.backoff)
    assess.replaced(entry, policy=replacing.backoff, cause=cause)
    assert entry.containers["setup"].restarts == 1 and entry.containers["setup"].awaiting_run == 0


def test_without_restarts_in_place_a_crashed_sidecar_replaces_the_instance_even_under_never() -> None:
    replacing = Rules(in_place=False, bills=True, backoff=RULES.backoff)
    entry, script = tracked(make_pod("Never", sidecar=True)), Script("setup", "proxy", "web", "worker")
    script.start("setup")
    script.end("setup", 0)
    script.start("proxy")
    script.start("web")
    assess.observe(entry, script.start("worker"), now=NOW, at=0.0, rules=replacing)
    assess.observe(entry, script.end("proxy", 0), now=NOW, at=1.0, rules=replacing)
    assert not entry.runs.finished
    assert entry.runs.due is not None and (entry.runs.due.step, entry.runs.due.at) == (Step.REPLACE, 1.0)


def test_reassess_follows_a_readiness_verdict_and_says_whether_the_status_changed() -> None:
    entry, script = probed_web()
    assert container(entry, "web")["ready"] is False
    assert not assess.reassess(entry, now=NOW, at=1.0, rules=RULES), "no verdict changed"
    judge(entry, "web", True)
    assert assess.reassess(entry, now=NOW, at=1.0, rules=RULES)
    assert container(entry, "web")["ready"] is True
    assert entry.desired_status is not None
    assert {c["type"]: c["status"] for c in entry.desired_status["conditions"]}["Ready"] == "True"
    judge(entry, "web", False)
    assert assess.reassess(entry, now=NOW, at=2.0, rules=RULES) and container(entry, "web")["ready"] is False


def test_reassess_gates_a_single_container_pod_on_its_readiness_verdict() -> None:
    pod = {"metadata": {"name": "one", "namespace": "default", "uid": "u2"},
           "spec": {"containers": [{"name": "main", "readinessProbe": {"exec": {"command": ["true"]}}}]}}  # fmt: skip
    entry = tracked(pod)
    running = Instance(InstanceId("i-1"), ClaimName("c"), InstanceState.RUNNING, NOW, started_at=NOW)
    assess.observe(entry, running, now=NOW, at=0.0, rules=RULES)
    assert entry.desired_status is not None and entry.desired_status["containerStatuses"][0]["ready"] is False
    judge(entry, "main", True)
    assert assess.reassess(entry, now=NOW, at=1.0, rules=RULES)
    assert entry.desired_status["containerStatuses"][0]["ready"] is True
    assert not assess.reassess(entry, now=NOW, at=2.0, rules=RULES)


def test_a_readiness_verdict_holds_for_the_run_it_was_made_for_only() -> None:
    """A container that restarts (or runs again in a new instance) is not ready until the
    prober has probed the new run, as a kubelet's new container is not: the verdict of the
    run before is not carried over, even before the prober has looked (design I9)."""
    entry, script = probed_web()
    judge(entry, "web", True)
    assert assess.reassess(entry, now=NOW, at=1.0, rules=RULES) and container(entry, "web")["ready"] is True
    assess.observe(entry, script.end("web", 1), now=NOW, at=2.0, rules=RULES)
    assert container(entry, "web")["ready"] is False
    assess.observe(entry, script.start("web"), now=NOW, at=20.0, rules=RULES)  # its restart: run 2
    assert entry.probe_verdicts.ready == {"web": True}  # the prober has not looked at run 2 yet
    assert container(entry, "web")["ready"] is False
    assert {c["type"]: c["status"] for c in (entry.desired_status or {})["conditions"]}["Ready"] == "False"
    judge(entry, "web", True)  # the prober probed run 2
    assert assess.reassess(entry, now=NOW, at=21.0, rules=RULES) and container(entry, "web")["ready"] is True


def test_a_restarted_manager_counts_on_from_each_containers_status() -> None:
    pod = make_pod("Always")
    pod["status"] = {
        "initContainerStatuses": [{"name": "setup", "restartCount": 2}],
        "containerStatuses": [{"name": "worker", "restartCount": 5, "lastState": {"terminated": {"exitCode": 9}}}],
    }
    entry = tracked(pod)
    worker, setup, web = (entry.container_runs(n) for n in ("worker", "setup", "web"))
    assert worker is not None and (worker.restarts, worker.last) == (5, {"exitCode": 9})
    assert setup is not None and setup.restarts == 2 and setup.policy == "OnFailure"
    assert web is not None and web.restarts == 0
    assert entry.container_runs("nope") is None


def test_unchanged_facts_still_move_the_status_when_a_probe_verdict_changed() -> None:
    """The poll tick's `observe` of the same facts recomputes once a verdict moved (the
    prober's own `reassess` may not have run yet), and costs nothing otherwise."""
    pod = {"metadata": {"name": "one", "namespace": "default", "uid": "u3"},
           "spec": {"containers": [{"name": "main", "readinessProbe": {"exec": {"command": ["true"]}}}]}}  # fmt: skip
    entry = tracked(pod)
    running = Instance(InstanceId("i-1"), ClaimName("c"), InstanceState.RUNNING, NOW, started_at=NOW)
    assert assess.observe(entry, running, now=NOW, at=0.0, rules=RULES)
    assert not assess.observe(entry, running, now=NOW, at=1.0, rules=RULES)
    judge(entry, "main", True)
    assert assess.observe(entry, running, now=NOW, at=2.0, rules=RULES)
    assert entry.desired_status is not None and entry.desired_status["containerStatuses"][0]["ready"] is True
    assert not assess.observe(entry, running, now=NOW, at=3.0, rules=RULES)


def test_a_reassess_after_a_restart_was_asked_never_reads_the_old_run_as_the_end() -> None:
    """The prober's flush may reassess between the restart call and the next list: the last
    facts still show the ended run, which must not finish the Pod (it would stay Failed)."""
    entry, script = running(make_pod("Always"))
    assess.observe(entry, script.end("web", 143), now=NOW, at=1.0, rules=RULES)
    assess.observe(entry, script.end("worker", 137), now=NOW, at=1.0, rules=RULES)
    for name in ("web", "worker"):
        entry.containers[name].restarted(new_run=2, policy=RULES.backoff)
    assert not assess.reassess(entry, now=NOW, at=1.5, rules=RULES)
    assert not entry.runs.finished
    assess.observe(entry, script.start("web", 2), now=NOW, at=2.0, rules=RULES)
    assert entry.desired_status is not None and entry.desired_status["phase"] == "Running"


def test_a_replacement_counts_a_restart_of_every_container_that_ran_in_the_old_instance() -> None:
    """A lost instance took every running container with it: each restarts in the new one,
    its last state the loss; the completed init container runs again there from its own end
    (as a kubelet reruns init containers in a new sandbox); a container that crashed on its
    own (no restart in place) keeps its own end, and a sibling the replacement killed reads 137."""
    lost = Ending(137, names.REASON_INSTANCE_LOST, None, NOW, "instance i-1 is gone")
    entry, script = running(make_pod("Always"))
    assess.replaced(entry, policy=RULES.backoff, cause=lost)
    assert [entry.containers[name].restarts for name in ("setup", "web", "worker")] == [1, 1, 1]
    assert entry.containers["web"].last == lost.terminated()
    setup = entry.containers["setup"]
    assert setup.last is not None and setup.last["exitCode"] == 0 and not setup.finished

    replacing = Rules(in_place=False, bills=True, backoff=RULES.backoff)
    entry, script = running(make_pod("Always"), rules=replacing)
    assess.observe(entry, script.end("worker", 3), now=NOW, at=1.0, rules=replacing)
    assess.replaced(entry, policy=replacing.backoff, cause=entry.runs.ended)
    assert entry.containers["worker"].last is not None and entry.containers["worker"].last["exitCode"] == 3
    assert entry.containers["web"].last is not None and entry.containers["web"].last["exitCode"] == 137


def test_a_restart_recorded_after_a_poll_saw_the_new_run_end_keeps_both_ends() -> None:
    """An init container fails, is restarted, and its new run succeeds before the restart is
    recorded: lastState is the failure, the state the success, and nothing runs it again."""
    entry, script = tracked(make_pod("Always")), Script("setup", "web", "worker")
    assess.observe(entry, script.start("setup"), now=NOW, at=0.0, rules=RULES)
    assess.observe(entry, script.end("setup", 1), now=NOW, at=1.0, rules=RULES)
    runs = entry.containers["setup"]
    assert runs.ended is not None
    of = (runs.ended, runs.ended_seen_at)  # what the lifecycle takes before calling restart
    script.start("setup", 2)
    assess.observe(entry, script.end("setup", 0, 3), now=NOW, at=2.0, rules=RULES)  # the poll, inside the call
    runs.restarted(new_run=2, policy=RULES.backoff, of=of)
    assert runs.restarts == 1 and runs.last is not None and runs.last["exitCode"] == 1
    assert runs.finished and runs.due is None


def test_a_poll_that_tells_the_restarted_runs_end_again_does_not_restart_the_new_run() -> None:
    """The restarted run's end, reported again with a detail settled (here its exit code)
    while the restart is being carried out, is that run's end, not the new run's: the
    restart is counted once and nothing else is due."""
    entry, script = tracked(make_pod("Always")), Script("setup", "web", "worker")
    assess.observe(entry, script.start("setup"), now=NOW, at=0.0, rules=RULES)
    assess.observe(entry, script.end("setup", 137), now=NOW, at=1.0, rules=RULES)
    runs = entry.containers["setup"]
    assert runs.ended is not None and runs.ended.run == 1
    of = (runs.ended, runs.ended_seen_at)
    assess.observe(entry, script.end("setup", 1), now=NOW, at=1.5, rules=RULES)  # the poll, inside the call
    assert runs.ended is not None and runs.ended.exit_code == 1
    runs.restarted(new_run=2, policy=RULES.backoff, of=of)
    assert runs.restarts == 1 and runs.ended is None and runs.due is None and entry.next_due() is None
    assert runs.last is not None and runs.last["exitCode"] == 1  # the later word on that run
