"""The fake cloud: instances, capacity, faults and the rules between them, thread-safe.

Used in-process by `FakeProvider` (through the cloud registry) and behind the HTTP
service. Clock and sleep are injected so delays and slow calls are tested without
waiting. Raises only `providers.errors` from cloud calls; control calls raise
ValueError for a malformed fault. Never keeps env values or credentials.
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

from providers import errors
from providers.base import (
    ConnectCredential,
    Instance,
    InstanceId,
    InstanceState,
    Offering,
    PodSpec,
    ProvisionRequest,
    ProvisionResult,
)
from providers.fake.calllog import CallLog, CallRecord
from providers.fake.console import LogChunk, log_chunk
from providers.fake.faults import Action, Fault, parse_fault
from providers.fake.records import InstanceRecord
from providers.fake.scenario import OfferingSpec, Scenario
from providers.fake.shell import ScriptedProcess

STATE_VERSION = 1


class _Call:
    def __init__(self, now: float) -> None:
        self.now = now
        self.outcome = "ok"


class FakeCloud:
    """One fake cloud account. `on_change` receives a snapshot after every change (the
    HTTP service saves it to the state file)."""

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
        self._instances: dict[str, InstanceRecord] = {}
        self._faults: dict[str, Fault] = {}
        self._counter = 0
        self._fault_counter = 0
        self._dirty = False
        self._calls = CallLog()

    # -- the provider's calls ---------------------------------------------------------
    def provision(self, pod: PodSpec, request: ProvisionRequest) -> ProvisionResult:
        tier = request.capacity_type.value if request.capacity_type else "-"
        summary = (
            f"claim={request.claim} accelerator={pod.accelerator or 'cpu'} gpus={pod.gpu_count} tier={tier} "
            f"region={request.region or '-'} env_keys={len(request.env)}"
        )
        with self._call("provision", summary) as call:
            if not request.claim:
                raise errors.InvalidRequest("fake: the request has no claim name")
            existing = next((r for r in self._instances.values() if r.claim == request.claim), None)
            if existing is not None:
                call.outcome = f"ok adopted {existing.id}"
                return ProvisionResult(InstanceId(existing.id), reserved=True, endpoint=existing.endpoint)
            spec = self._choose(pod, request)
            self._counter += 1
            record = InstanceRecord(
                id=f"fake-{self._counter}",
                claim=request.claim,
                state=InstanceState.PROVISIONING,
                created_at=call.now,
                ready_at=call.now + spec.provisioning_delay,
                accelerator=spec.accelerator,
                gpu_count=spec.gpu_count,
                tier=spec.tier,
                region=spec.region,
                image=pod.image,
                message="waiting for capacity to boot",
            )
            record.advance(call.now, self.scenario)
            self._instances[record.id] = record
            self._dirty = True
            call.outcome = f"ok created {record.id} ({spec.tier.value} {spec.region})"
            credential = ConnectCredential({"token": secrets.token_urlsafe(24).encode()})
            return ProvisionResult(
                InstanceId(record.id), reserved=True, credential=credential, endpoint=record.endpoint
            )

    def terminate(self, instance_id: str) -> None:
        with self._call("terminate", f"id={instance_id}") as call:
            record = self._instances.get(instance_id)
            if record is None:
                call.outcome = "ok already gone"
                return
            record.terminate(call.now, self.scenario.termination_delay)
            self._sweep(call.now)
            self._dirty = True

    def get(self, instance_id: str) -> Instance | None:
        with self._call("get", f"id={instance_id}") as call:
            record = self._instances.get(instance_id)
            call.outcome = "ok gone" if record is None else f"ok {record.state.value}"
            return None if record is None else record.to_instance()

    def list(self) -> builtins.list[Instance]:
        with self._call("list", "") as call:
            lag = self.scenario.list_lag
            found = [r.to_instance() for r in self._instances.values() if call.now - r.created_at >= lag]
            call.outcome = f"ok {len(found)} instances"
            return found

    def offerings(self) -> builtins.list[Offering]:
        with self._call("offerings", ""):
            return [spec.offering(available=self._admits(spec) is None) for spec in self.scenario.offerings]

    def log_chunk(self, instance_id: str, *, after: int, limit: int) -> LogChunk:
        with self._call("logs", f"id={instance_id}", record=False):
            return log_chunk(self._require(instance_id), self.scenario.log, self._clock(), after=after, limit=limit)

    def exec(self, instance_id: str, command: Sequence[str], *, tty: bool, stdin: bool) -> ScriptedProcess:
        program = command[0] if command else ""
        with self._call("exec", f"id={instance_id} program={program} tty={tty}"):
            record = self._require(instance_id)
            if record.state is not InstanceState.RUNNING:
                raise errors.NotFound(f"fake: instance {instance_id} is not running ({record.state.value})")
            return ScriptedProcess(command, tty=tty, stdin=stdin, canned=self.scenario.commands)

    # -- control: faults, inspection, reset -------------------------------------------
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

    def refuse(self, reason: str = "capacity", **match: Any) -> dict[str, Any]:
        """Refuse provisions: `accelerator`, `tier`, `region` narrow it; `count`, `seconds` bound it."""
        return self.inject({"kind": "refuse", "reason": reason, **match})

    def outage(self, seconds: float | None = None) -> dict[str, Any]:
        return self.inject({"kind": "outage", "seconds": seconds})

    def slow(self, delay: float, seconds: float | None = None) -> dict[str, Any]:
        return self.inject({"kind": "slow", "delay": delay, "seconds": seconds})

    def lose(self, instance: str | None = None, *, claim: str | None = None, vanish: bool = False) -> dict[str, Any]:
        return self.inject({"kind": "lose", "instance": instance, "claim": claim, "vanish": vanish})

    def exit(self, instance: str | None = None, *, code: int, claim: str | None = None) -> dict[str, Any]:
        return self.inject({"kind": "exit", "instance": instance, "claim": claim, "code": code})

    def faults(self) -> builtins.list[Fault]:
        with self._lock:
            self._expire(self._clock())
            return list(self._faults.values())

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
        """Every stored instance, raw (terminating ones and those list_lag hides included)."""
        with self._lock:
            now = self._clock()
            self._advance(now)
            return [r.to_dict() for r in self._instances.values()]

    def call_log(self, method: str | None = None) -> builtins.list[CallRecord]:
        with self._lock:
            return self._calls.records(method)

    def reset(self) -> None:
        """Forget instances, faults and calls. Ids keep counting, so none is ever reused."""
        with self._lock:
            self._instances.clear()
            self._faults.clear()
            self._calls.clear()
            self._save()

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {
                "version": STATE_VERSION,
                "counter": self._counter,
                "fault_counter": self._fault_counter,
                "instances": [r.to_dict() for r in self._instances.values()],
                "faults": [f.to_dict() for f in self._faults.values()],
            }

    def restore(self, state: Mapping[str, Any]) -> None:
        """Load a snapshot (from the state file); ValueError if it is not one."""
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"fake state: unknown version {state.get('version')!r}")
        try:
            records = [InstanceRecord.from_dict(r) for r in state.get("instances", [])]
            faults = [Fault.from_dict(f) for f in state.get("faults", [])]
            counters = int(state.get("counter", 0)), int(state.get("fault_counter", 0))
        except (TypeError, ValueError, KeyError) as exc:
            raise ValueError(f"fake state: malformed: {exc}") from exc
        with self._lock:
            self._instances = {r.id: r for r in records}
            self._faults = {f.id: f for f in faults}
            self._counter, self._fault_counter = counters

    # -- rules --------------------------------------------------------------------------
    @contextmanager
    def _call(self, method: str, summary: str, *, record: bool = True) -> Iterator[_Call]:
        """Every cloud call: slow faults sleep (outside the lock), outages refuse to answer,
        time-driven transitions are applied, the outcome is logged, changes are saved."""
        delay = sum(f.delay for f in self.faults() if f.kind == "slow")
        if delay:
            self._sleep(delay)
        with self._lock:
            call = _Call(self._clock())
            try:
                self._expire(call.now)
                outage = next((f for f in self._faults.values() if f.kind == "outage"), None)
                if outage is not None:
                    retry = None if outage.until is None else max(0.0, outage.until - call.now)
                    raise errors.Unavailable(f"fake: the cloud is unreachable (fault {outage.id})", retry_after=retry)
                self._advance(call.now)
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

    def _choose(self, pod: PodSpec, request: ProvisionRequest) -> OfferingSpec:
        """The offering for this Pod and request, or the refusal that applies."""
        if pod.accelerator is None and pod.gpu_count > 0:
            raise errors.InvalidRequest("fake: a GPU count needs the nebula.io/accelerator label")
        shape = [
            o
            for o in self.scenario.offerings
            if o.accelerator == pod.accelerator and (pod.gpu_count == 0 or o.gpu_count in (0, pod.gpu_count))
        ]
        wanted = f"{pod.accelerator or 'cpu'} x{pod.gpu_count}"
        if not shape:
            raise errors.InvalidRequest(f"fake: no offering has {wanted}")
        tier, region = request.capacity_type, request.region
        placed = [o for o in shape if (tier is None or o.tier is tier) and (region is None or o.region == region)]
        if not placed:
            where = f"{tier.value if tier else 'any tier'} in {region or 'any region'}"
            raise errors.NoCapacity(f"fake: {wanted} is not offered {where}")
        refusal: errors.Refused | None = None
        for spec in placed:
            problem = self._admits(spec)
            if problem is None:
                return spec
            if refusal is None:
                refusal = self._refusal(problem, spec)
        assert refusal is not None
        raise refusal

    def _admits(self, spec: OfferingSpec) -> Fault | str | None:
        """Why `spec` cannot take one more instance now (a fault or "full"), else None."""
        fault = next((f for f in self._faults.values() if f.refuses(spec)), None)
        if fault is not None:
            return fault
        if spec.capacity is not None and sum(r.holds(spec) for r in self._instances.values()) >= spec.capacity:
            return "full"
        return None

    def _refusal(self, problem: Fault | str, spec: OfferingSpec) -> errors.Refused:
        if isinstance(problem, Fault):
            if problem.remaining is not None:
                self._faults[problem.id] = replace(problem, remaining=problem.remaining - 1)
                self._dirty = True
            return problem.error(spec)
        shape = f"{spec.accelerator or 'cpu'} x{spec.gpu_count} {spec.tier.value} in {spec.region}"
        return errors.NoCapacity(f"fake: no capacity for {shape} (all {spec.capacity} in use)")

    def _apply(self, action: Action, now: float) -> dict[str, Any]:
        self._advance(now)
        record = self._instances.get(action.instance or "")
        if record is None and action.claim:
            record = next((r for r in self._instances.values() if r.claim == action.claim), None)
        if record is None:
            raise errors.NotFound(f"fake: no instance {action.instance or action.claim}")
        if action.kind == "lose" and action.vanish:
            del self._instances[record.id]
        elif action.kind == "lose":
            record.lose(now)
        else:
            record.finish(now, action.code)
        self._calls.add(now, "inject", f"{action.kind} {record.id}", "ok")
        self._save()
        return {"kind": action.kind, "instance": record.id, "applied": True}

    def _require(self, instance_id: str) -> InstanceRecord:
        record = self._instances.get(instance_id)
        if record is None:
            raise errors.NotFound(f"fake: no instance {instance_id}")
        return record

    def _advance(self, now: float) -> None:
        for record in self._instances.values():
            record.advance(now, self.scenario)
        self._sweep(now)

    def _sweep(self, now: float) -> None:
        for gone in [r.id for r in self._instances.values() if r.gone_at is not None and r.gone_at <= now]:
            del self._instances[gone]
            self._dirty = True

    def _expire(self, now: float) -> None:
        for done in [f.id for f in self._faults.values() if not f.active(now)]:
            del self._faults[done]
            self._dirty = True

    def _save(self) -> None:
        self._dirty = False
        if self._on_change is not None:
            self._on_change(self.snapshot())
