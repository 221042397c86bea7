"""The poll tick's quiet path (vnode.model.quiet): a Pod whose facts did not move is passed over
without the full assessment, and only where the full assessment (`assess.observe`) would change
nothing; a quiet Pod whose last write failed is still handed back for a write."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from providers.base import ClaimName, Instance, InstanceId, InstanceState, PodSpec, ProvisionRequest
from providers.claim import claim_name
from providers.fake import FakeProvider
from providers.shape import ContainerFacts, ContainerState
from tests.support.factories import make_pod
from vnode.handler import Handler
from vnode.model import assess, quiet
from vnode.model.runs import Due, Rules, Step
from vnode.model.status import Verdicts
from vnode.model.tracking import Tracked, TrackedMap

T0 = datetime(2026, 12, 5, 10, 0, 0, tzinfo=UTC)
RULES = Rules()
SEEN_AT = T0.timestamp() + 2


def running(**facts: Any) -> Instance:
    values: dict[str, Any] = {
        "id": InstanceId("i-1"),
        "claim": ClaimName("c"),
        "state": InstanceState.RUNNING,
        "created_at": T0,
        "started_at": T0,
        "endpoint": "fake://i-1",
    }
    values.update(facts)
    return Instance(**values)


def adopted() -> Tracked:
    """A Pod adopted with its running instance, its status computed and written."""
    entry = assess.adopt(TrackedMap(), make_pod("p1", namespace="ns", uid="u1"), running(), at=1.0, now=T0, rules=RULES)
    entry.written_status = entry.desired_status
    entry.written_annotations.update(entry.desired_annotations)
    return entry


def state(entry: Tracked) -> tuple[Any, ...]:
    """Everything an observation may move."""
    return (
        entry.desired_status,
        dict(entry.desired_annotations),
        entry.billing,
        entry.billing_seen,
        replace(entry.runs),
        list(entry.events),
        dict(entry.containers),
        entry.last_instance,
        entry.judged_by,
        entry.misses,
        entry.missing_since,
    )


def same_object(entry: Tracked) -> Instance:
    assert entry.last_instance is not None
    return entry.last_instance


def closed_billing(entry: Tracked) -> Instance:
    assert entry.billing is not None and entry.billing.open is not None
    entry.billing = entry.billing.closed_at(entry.billing.open + 1)
    return running()


def new_verdict(entry: Tracked) -> Instance:
    entry.probe_verdicts = Verdicts(ready={"main": True}, runs={"main": ("i-1", 1)})
    return running()


def restart_due(entry: Tracked) -> Instance:
    entry.runs.due = Due(Step.RESTART, 5.0)
    return running()


def finished(entry: Tracked) -> Instance:
    entry.runs.finished = True
    return running()


def missed_once(entry: Tracked) -> Instance:
    entry.misses, entry.missing_since = 1, 1.5
    return running()


def no_status_yet(entry: Tracked) -> Instance:
    entry.desired_status = None
    return running()


CASES: list[tuple[str, Callable[[Tracked], Instance], bool]] = [
    ("the same facts in a new object (every list builds new ones)", lambda entry: running(), True),
    ("the very object last observed", same_object, True),
    ("the workload ended", lambda entry: running(state=InstanceState.FAILED, exit_code=1, finished_at=T0), False),
    ("it restarted in place", lambda entry: running(runs=2), False),
    ("a new endpoint", lambda entry: running(endpoint="fake://elsewhere"), False),
    ("it is terminating", lambda entry: running(state=InstanceState.TERMINATING), False),
    ("another instance of the claim", lambda entry: running(id=InstanceId("i-2")), False),
    ("queued again (a queued instance has a deadline)", lambda entry: running(state=InstanceState.PROVISIONING), False),
    ("its billing span was closed meanwhile", closed_billing, False),
    ("a probe verdict came in", new_verdict, False),
    ("a restart is due", restart_due, False),
    ("the Pod finished", finished, False),
    ("one list missed it before", missed_once, False),
    ("no status computed yet", no_status_yet, False),
]


def check_quiet_against_full(
    quick: Tracked, full: Tracked, what: str, change: Callable[[Tracked], Instance], expected: bool
) -> None:
    """Two equal entries: `change` applied to both; the quiet path on one must answer
    `expected`, and where it passes the Pod over, leave it as the full assessment leaves the other."""
    facts_quick, facts_full = change(quick), change(full)
    assert facts_quick == facts_full
    settled = quiet.settled(quick, facts_quick, rules=RULES, seen_at=SEEN_AT)
    assert settled is expected, what
    if settled:
        moved = assess.observe(full, facts_full, now=datetime.fromtimestamp(SEEN_AT, UTC), at=2.0, rules=RULES)
        assert moved is False
        assert full.next_due() is None  # nor would the tick find a step due
        assert state(quick) == state(full), "the quiet path left the entry as the full assessment does"
        assert quick.billing_seen == SEEN_AT, "seen billing in this list"


@pytest.mark.parametrize(("what", "change", "expected"), CASES, ids=[case[0] for case in CASES])
def test_a_settled_pod_takes_the_quiet_path_only_when_observe_would_change_nothing(
    what: str, change: Callable[[Tracked], Instance], expected: bool
) -> None:
    check_quiet_against_full(adopted(), adopted(), what, change, expected)


TWO = {"containers": [{"name": n, "image": "busybox", "command": ["sleep", "300"]} for n in ("main", "side")]}


def containers(**main: Any) -> tuple[ContainerFacts, ...]:
    facts = {"name": "main", "state": ContainerState.RUNNING, "started_at": T0, "runs": 1}
    facts.update(main)
    return (ContainerFacts(**facts), ContainerFacts("side", ContainerState.RUNNING, started_at=T0, runs=1))


def adopted_with_containers() -> Tracked:
    """A Pod of two containers adopted with its running instance, which reports each."""
    pod = make_pod("p2", namespace="ns", uid="u2", spec=TWO)
    entry = assess.adopt(TrackedMap(), pod, running(containers=containers()), at=1.0, now=T0, rules=RULES)
    entry.written_status = entry.desired_status
    entry.written_annotations.update(entry.desired_annotations)
    return entry


def container_restart_due(entry: Tracked) -> Instance:
    entry.containers["side"].due = Due(Step.RESTART, 5.0)
    return running(containers=containers())


CONTAINER_CASES: list[tuple[str, Callable[[Tracked], Instance], bool]] = [
    ("each container's same facts in a new object", lambda entry: running(containers=containers()), True),
    (
        "a container ended",
        lambda entry: running(containers=containers(state=ContainerState.TERMINATED, exit_code=1, finished_at=T0)),
        False,
    ),
    ("a container restarted", lambda entry: running(containers=containers(runs=2)), False),
    ("a container's restart is due", container_restart_due, False),
]


@pytest.mark.parametrize(("what", "change", "expected"), CONTAINER_CASES, ids=[case[0] for case in CONTAINER_CASES])
def test_a_settled_pod_of_several_containers_takes_the_quiet_path_only_when_observe_would_change_nothing(
    what: str, change: Callable[[Tracked], Instance], expected: bool
) -> None:
    quick, full = adopted_with_containers(), adopted_with_containers()
    assert quick.containers, "the entry weighs each container"
    check_quiet_against_full(quick, full, what, change, expected)


class NoKube:
    """A quiet tick makes no API call: any would be a bug."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"unexpected API call {name} during a poll tick")


def test_a_quiet_tick_hands_back_only_the_pods_whose_write_failed_or_whose_facts_moved() -> None:
    provider = FakeProvider("quiet", {"cloud": f"quiet-{uuid.uuid4().hex}"})
    handler = Handler(provider, kube=NoKube(), events=NoKube(), poll_interval=1.0)  # type: ignore[arg-type]
    entries = []
    for index in range(3):
        pod = make_pod(f"p{index}", namespace="ns", uid=str(uuid.uuid4()))
        meta = pod["metadata"]
        spec = PodSpec(namespace="ns", name=meta["name"], uid=meta["uid"], container="main", image="x")
        result = provider.provision(spec, ProvisionRequest(claim=claim_name("ns", meta["name"], meta["uid"])))
        found = provider.get(result.instance_id)
        assert found is not None
        handler.adopt(pod, found)
        entry = handler.tracked(f"ns/p{index}")
        assert entry is not None
        entry.written_status = entry.desired_status  # as after the first flush
        entry.written_annotations.update(entry.desired_annotations)
        entries.append(entry)
    assert handler.status_sync.poll_once(None) == [], "nothing moved: nothing to write"
    entries[1].written_status = None  # as after a failed write
    assert handler.status_sync.poll_once(None) == ["ns/p1"]
    entries[1].written_status = entries[1].desired_status
    assert entries[2].instance_id is not None
    provider.terminate(entries[2].instance_id)
    assert handler.status_sync.poll_once(None) == ["ns/p2"], "its instance is going: its status moves"


def test_the_quiet_path_decides_billing_again_when_the_record_the_facts_or_the_rules_change() -> None:
    entry = adopted()
    assert quiet.settled(entry, running(), rules=RULES, seen_at=SEEN_AT)
    assert entry.quiet_record is entry.billing and entry.quiet_facts is entry.last_instance
    assert entry.billing is not None and entry.billing.open is not None
    entry.billing = entry.billing.closed_at(entry.billing.open + 1)  # closed meanwhile (a stop)
    assert not quiet.settled(entry, running(), rules=RULES, seen_at=SEEN_AT + 1), "a closed span: decided again"
    assert entry.billing_seen == SEEN_AT, "not moved by a Pod that was not quiet"
    fresh = adopted()
    assert quiet.settled(fresh, running(), rules=RULES, seen_at=SEEN_AT)
    fresh.last_instance = running(message="another fact object, equal")  # as the full path leaves it
    assert quiet.settled(fresh, running(message="another fact object, equal"), rules=RULES, seen_at=SEEN_AT)
    assert fresh.quiet_facts is fresh.last_instance, "decided again for the new facts"
    quiet.forget_rules([fresh])
    assert fresh.quiet_facts is None and fresh.quiet_record is None
    assert quiet.settled(fresh, running(message="another fact object, equal"), rules=RULES, seen_at=SEEN_AT + 2)
    assert fresh.quiet_record is fresh.billing and fresh.billing_seen == SEEN_AT + 2


def test_the_claims_of_the_nodes_pods_come_from_tracking_and_are_those_of_their_uids() -> None:
    tracked = TrackedMap()
    held = make_pod("held", "bench", namespace="default", uid=str(uuid.uuid4()))
    other = make_pod("other", "bench", namespace="default", uid=str(uuid.uuid4()))
    renamed = make_pod("held", "bench", namespace="default", uid=str(uuid.uuid4()))  # took the name
    entry = tracked.track(held)
    claims = tracked.claims_of([held, other, renamed])
    assert claims == {
        claim_name("default", p["metadata"]["name"], p["metadata"]["uid"]) for p in (held, other, renamed)
    }
    assert entry.claim in claims and len(claims) == 3
    entry.claim = ClaimName("from-the-entry")  # read from tracking, not hashed again
    assert tracked.claims_of([held]) == {ClaimName("from-the-entry")}
    assert tracked.claims_of([renamed]) == {claim_name("default", "held", renamed["metadata"]["uid"])}
    assert tracked.claims_of([]) == set()
