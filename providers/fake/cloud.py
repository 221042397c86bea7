"""The fake cloud: instances, capacity, faults and the rules between them, thread-safe.

Used in-process by `FakeProvider` (through the cloud registry) and behind the HTTP
service. Every provider call names its owner (an `Owner.key`) and sees only that owner's
instances; control calls (faults, exit, lose, inspection) act by id or claim on any.
Clock and sleep are injected so delays and slow calls are tested without waiting.
Raises only `providers.errors` from cloud calls; control calls raise ValueError for a
malformed fault. Never keeps env values or credentials.
Tests: tests/providers/fake/test_fake_cloud.py.
"""

from __future__ import annotations

import builtins
import secrets
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from providers import base, errors
from providers.fake import ownership, workload
from providers.fake.calllog import Call, CallLog, CallRecord
from providers.fake.catalog import Refusal, admits, choose_offering
from providers.fake.faults import Action, Controls, Fault, parse_fault
from providers.fake.interrupts import NoticeBook, NoticeCalls
from providers.fake.logs import LogChunk, log_chunk
from providers.fake.process import ScriptedProcess
from providers.fake.records import InstanceRecord
from providers.fake.scenario import Scenario
from providers.fake.serial import CallThread, routed
from providers.fake.state import decode_snapshot, encode_snapshot
from providers.fake.store import Records
from providers.fake.workload import ContainerRecord


class FakeCloud(Controls, NoticeCalls):
    """One fake cloud account. `on_change` receives a snapshot after every change (the
    HTTP service saves it to the state file). `notices`/`ack` come from `NoticeCalls`."""

    def __init__(
        self,
        scenario: Scenario,
        *,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        on_change: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.scenario = scenario
        self._clock = clock
        self._sleep = sleep
        self._on_change = on_change
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._serial = CallThread(self._lock)  # where the routed calls run (providers/fake/serial.py)
        self._book = NoticeBook()
        self._instances = Records()
        self._faults: dict[str, Fault] = {}
        self._counter = 0
        self._fault_counter = 0
        self._dirty = False
        self._calls = CallLog()

    # -- the provider's calls: each sees only `owner`'s instances -------------------------
    @routed("provision")
    def provision(self, pod: base.PodSpec, request: base.ProvisionRequest, *, owner: str) -> base.ProvisionResult:
        """Idempotent on the owner's claim, ignoring instances that are going away."""
        tier = request.capacity_type.value if request.capacity_type else "-"
        summary = (
            f"owner={owner} claim={request.claim} accelerator={pod.accelerator or 'cpu'} gpus={pod.gpu_count} "
            f"tier={tier} region={request.region or '-'} env_keys={len(request.env)} "
            f"containers={len(pod.init_containers) + len(pod.app_containers())} volumes={len(request.volumes)} "
            f"egress={request.egress.describe().replace(' ', '')}"
        )
        with self._call("provision", summary, owner=owner) as call:
            if not request.claim:
                raise errors.InvalidRequest("fake: the request has no claim name")
            existing = ownership.claim_holder(
                self._instances.with_claim(request.claim, call.now, self.scenario), request.claim, owner
            )
            if existing is not None:
                call.outcome = f"ok adopted {existing.id}"
                return base.ProvisionResult(base.InstanceId(existing.id), reserved=True, endpoint=existing.endpoint)
            choice = choose_offering(pod, request, self.scenario, self._faults, self._counted(call.now))
            if isinstance(choice, Refusal):
                if choice.fault is not None:
                    self._spend(choice.fault)
                raise choice.error
            self._counter += 1
            record = InstanceRecord(
                id=f"fake-{self._counter}",
                claim=request.claim,
                state=base.InstanceState.PROVISIONING,
                created_at=call.now,
                ready_at=call.now + choice.provisioning_delay,
                accelerator=choice.accelerator,
                gpu_count=choice.gpu_count,
                tier=choice.tier,
                region=choice.region,
                image=pod.image,
                message="waiting for capacity to boot",
                owner=owner,
                containers=workload.build_containers(pod.init_containers, pod.app_containers(), request.volumes),
                reports_containers=bool(pod.containers),
                restart_policy=pod.restart_policy,
                volumes=[(v.name, v.kind) for v in request.volumes],
            )
            record.advance(call.now, self.scenario)
            self._instances.add(record)
            self._dirty = True
            call.outcome = f"ok created {record.id} ({choice.tier.value} {choice.region})"
            credential = base.ConnectCredential({"token": secrets.token_urlsafe(24).encode()})
            return base.ProvisionResult(
                base.InstanceId(record.id), reserved=True, credential=credential, endpoint=record.endpoint
            )

    @routed("terminate")
    def terminate(self, instance_id: str, *, owner: str) -> None:
        """TERMINATING for the scenario's termination_delay, then TERMINATED (listed, output
        readable) for its retention_seconds, then gone. Idempotent."""
        with self._call("terminate", f"owner={owner} id={instance_id}", owner=owner) as call:
            record = self._instances.owned(instance_id, owner, call.now, self.scenario)
            if record is None:
                call.outcome = "ok already gone"
                return
            record.terminate(call.now, self.scenario.termination_delay, self.scenario.retention_seconds)
            record.advance(call.now, self.scenario)
            self._instances.going(record)
            self._sweep(call.now)
            self._dirty = True

    @routed("get")
    def get(self, instance_id: str, *, owner: str) -> base.Instance | None:
        with self._call("get", f"owner={owner} id={instance_id}", owner=owner) as call:
            record = self._instances.owned(instance_id, owner, call.now, self.scenario)
            call.outcome = "ok gone" if record is None else f"ok {record.state.value}"
            return None if record is None else record.to_instance()

    def list(self, *, owner: str) -> builtins.list[base.Instance]:
        """The owner's instances, except those younger than list_lag and those a hide
        fault keeps out (each list it hides from spends one of its count)."""
        with self._call("list", f"owner={owner}", owner=owner) as call:
            lag = self.scenario.list_lag
            shown = [
                r for r in self._instances if ownership.owned(r, owner) is not None and call.now - r.created_at >= lag
            ]
            for record in shown:
                record.advance(call.now, self.scenario)
            hiding = [f for f in self._faults.values() if any(f.hides(r.id, r.claim) for r in shown)]
            for fault in hiding:
                self._spend(fault)
            found = [r.to_instance() for r in shown if not any(f.hides(r.id, r.claim) for f in hiding)]
            call.outcome = f"ok {len(found)} instances"
            return found

    def restart(self, instance_id: str, *, owner: str, container: str = "") -> None:
        """Run an ended container (empty: the whole ended workload, from its first container)
        again in the same instance (runs + 1, new started_at); InvalidRequest while it has not
        ended, NotFound for no such container or once the instance is gone or going."""
        with self._call("restart", f"owner={owner} id={instance_id} container={container}", owner=owner) as call:
            record = self._require(instance_id, owner, call.now)
            record.restart(call.now, container, self.scenario)
            self._dirty = True
            call.outcome = f"ok run {record.runs}"

    @routed("stop_container")
    def stop_container(self, instance_id: str, container: str, *, owner: str, grace: float = 0.0) -> None:
        """SIGTERM to one container, SIGKILL `grace` seconds later (at once for `grace <= 0`);
        the scenario's `sigterm` says how it reacts (dies at once: 143; traps it and exits
        after N s with its code; ignores it: 137 at the grace's end). Returns at once; a
        second call with a shorter grace moves the SIGKILL earlier. A container that is not
        running is success; NotFound for none."""
        summary = f"owner={owner} id={instance_id} container={container} grace={grace:g}"
        with self._call("stop_container", summary, owner=owner) as call:
            record = self._require(instance_id, owner, call.now)
            record.stop_container(call.now, record.require(container), grace, self.scenario)
            self._dirty = True

    def offerings(self) -> builtins.list[base.Offering]:
        with self._call("offerings", "") as call:
            records = self._counted(call.now)
            return [
                spec.offering(available=admits(spec, self._faults, records) is None) for spec in self.scenario.offerings
            ]

    def log_chunk(
        self,
        instance_id: str,
        *,
        owner: str,
        after: int,
        limit: int,
        previous: bool = False,
        opening: bool = False,
        container: str = "",
    ) -> LogChunk:
        """Output lines of a container's current run (or the previous one). Only a stream's
        opening fetch is logged, as `logs`: a followed stream polls many times per call."""
        summary = f"owner={owner} id={instance_id} container={container} previous={previous}"
        with self._call("logs", summary, owner=owner, record=opening) as call:
            record = self._require(instance_id, owner, call.now)
            return log_chunk(
                record,
                self.scenario.log,
                call.now,
                after=after,
                limit=limit,
                previous=previous,
                container=container,
            )

    def exec(
        self, instance_id: str, command: Sequence[str], *, owner: str, tty: bool, stdin: bool, container: str = ""
    ) -> ScriptedProcess:
        program = command[0] if command else ""
        summary = f"owner={owner} id={instance_id} container={container} program={program} tty={tty}"
        with self._call("exec", summary, owner=owner) as call:
            found = self._require_running(instance_id, owner, container, call.now)
            files = frozenset(path for path, _ in found.files)
            return ScriptedProcess(command, tty=tty, stdin=stdin, canned=self.scenario.commands, files=files)

    def attach(self, instance_id: str, *, owner: str, tty: bool, stdin: bool, container: str = "") -> ScriptedProcess:
        """The scripted container's console: each stdin line echoed back, ending with stdin."""
        summary = f"owner={owner} id={instance_id} container={container} tty={tty}"
        with self._call("attach", summary, owner=owner) as call:
            self._require_running(instance_id, owner, container, call.now)
            return ScriptedProcess(["cat"], tty=tty, stdin=stdin, canned=self.scenario.commands)

    # -- control: faults, inspection, reset (any owner's instances) ------------------------
    def inject(self, data: Mapping[str, Any]) -> dict[str, Any]:
        """Add a standing fault or apply a one-shot one; returns what was done.
        ValueError for a malformed fault, NotFound for an unknown instance."""
        with self._lock:
            now = self._clock()
            fault = parse_fault(data, fault_id=f"f-{self._fault_counter + 1}", now=now)
            if isinstance(fault, Action):
                return self._apply(fault, now)
            self._fault_counter += 1
            self._faults[fault.id] = fault
            self._calls.add(now, "inject", fault.kind, f"ok {fault.id}")
            self._save()
            return fault.to_dict()

    def faults(self) -> builtins.list[Fault]:
        with self._lock:
            self._expire(self._clock())
            return builtins.list(self._faults.values())

    def clear(self, fault_id: str | None = None) -> int:
        """Remove one fault (NotFound if unknown) or all; the number removed."""
        with self._lock:
            if fault_id is None:
                count = len(self._faults)
                self._faults.clear()
            elif self._faults.pop(fault_id, None) is None:
                raise errors.NotFound(f"fake: no fault {fault_id}")
            else:
                count = 1
            self._calls.add(self._clock(), "clear", fault_id or "all", f"ok {count} removed")
            self._save()
            return count

    def instances(self) -> builtins.list[dict[str, Any]]:
        """Every stored instance, raw, whoever owns it (terminating ones and those list_lag
        or a hide fault keeps out of `list` included), with its containers and the volume
        files each got (path and mode; contents are never kept)."""
        with self._lock:
            now = self._clock()
            self._advance(now)
            return [r.to_dict() for r in self._instances]

    def call_log(self, method: str | None = None) -> builtins.list[CallRecord]:
        with self._lock:
            return self._calls.records(method)

    def call_counts(self) -> dict[str, int]:
        """Calls by method since the last reset, beyond the log's length too."""
        with self._lock:
            return self._calls.counts()

    def reset(self) -> None:
        """Forget instances, faults and calls. Ids keep counting, so none is ever reused."""
        with self._lock:
            self._instances.clear()
            self._faults.clear()
            self._calls.clear()
            self._book.clear()
            self._save()

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            self._advance(self._clock())
            return encode_snapshot(
                counter=self._counter,
                fault_counter=self._fault_counter,
                records=builtins.list(self._instances),
                faults=self._faults.values(),
                notices=self._book.to_dict(),
            )

    def restore(self, state: Mapping[str, Any]) -> None:
        """Load a snapshot (from the state file); ValueError if it is not one."""
        snapshot = decode_snapshot(state)
        with self._lock:
            self._instances.clear()
            for record in snapshot.records:
                self._instances.add(record)
            self._faults = {f.id: f for f in snapshot.faults}
            self._counter, self._fault_counter = snapshot.counter, snapshot.fault_counter
            self._book.restore(snapshot.notices)

    # -- rules --------------------------------------------------------------------------
    @contextmanager
    def _call(self, method: str, summary: str, *, owner: str | None = None, record: bool = True) -> Iterator[Call]:
        """Every cloud call: slow faults sleep (outside the lock; a routed call's in its caller's
        thread), outages refuse to answer, a provider call without owner is refused, time-driven
        transitions are applied, the outcome is logged, changes are saved."""
        if not self._serial.serving():
            self._pause(method)
        with self._lock:
            call = Call(self._clock())
            try:
                self._expire(call.now)
                outage = next((f for f in self._faults.values() if f.kind == "outage"), None)
                if outage is not None:
                    retry = None if outage.until is None else max(0.0, outage.until - call.now)
                    raise errors.Unavailable(f"fake: the cloud is unreachable (fault {outage.id})", retry_after=retry)
                if owner is not None:
                    ownership.check_owner(owner)
                self._sweep(call.now)
                yield call
            except errors.ProviderError as exc:
                if record:
                    self._calls.add(call.now, method, summary, f"{type(exc).__name__}: {exc}")
                raise
            finally:
                if self._dirty:
                    self._save()
            if record:
                self._calls.add(call.now, method, summary, call.outcome)

    def _pause(self, method: str) -> None:
        delay = self.scenario.api_latency.get(method, 0.0)
        if self._faults:  # unlocked peek: most calls meet no fault at all
            delay += sum(f.delay for f in self.faults() if f.kind == "slow")
        if delay:
            self._sleep(delay)

    def _apply(self, action: Action, now: float) -> dict[str, Any]:
        self._advance(now)
        if action.kind == "interrupt":
            return self._interrupt(action, now)
        record = self._instances.apply(action, now, self.scenario)
        self._calls.add(now, "inject", f"{action.kind} {record.id}", "ok")
        self._save()
        return {"kind": action.kind, "instance": record.id, "applied": True}

    def _spend(self, fault: Fault) -> None:
        """One use of a counted fault (a refusal, a list hidden from); unlimited ones stay."""
        if fault.remaining is not None:
            self._faults[fault.id] = replace(fault, remaining=fault.remaining - 1)
            self._dirty = True

    def _require(self, instance_id: str, owner: str, now: float) -> InstanceRecord:
        return self._instances.require(instance_id, owner, now, self.scenario)

    def _require_running(self, instance_id: str, owner: str, container: str, now: float) -> ContainerRecord:
        return self._instances.require_running(instance_id, owner, container, now, self.scenario)

    def _advance(self, now: float) -> None:
        """Every record brought up to now: for the calls that read them all."""
        self._sweep(now)  # first: an interrupt's deadline takes its instance at the deadline
        self._instances.advance_all(now, self.scenario)

    def _counted(self, now: float) -> builtins.list[InstanceRecord]:
        """The records capacity is counted over: none unless an offering has a capacity
        (then every record, advanced to now, since time frees capacity)."""
        if all(o.capacity is None for o in self.scenario.offerings):
            return []
        self._advance(now)
        return builtins.list(self._instances)

    def _sweep(self, now: float) -> None:
        """The interrupts' deadlines passed by `now` take their instances; forgotten records go."""
        if self._book.take_due(now, self._instances, self.scenario) + self._instances.sweep(now):
            self._dirty = True

    def _expire(self, now: float) -> None:
        for done in [f.id for f in self._faults.values() if not f.active(now)]:
            del self._faults[done]
            self._dirty = True

    def _save(self) -> None:
        self._dirty = False
        if self._on_change is not None:
            self._on_change(self.snapshot())
