"""Test infrastructure: the fake Modal's in-memory state (apps, images, secrets, sandboxes,
execs) and its controls (queue, injected failures, outage), guarded by one lock.

Secrets' values are kept only to build process environments; nothing here logs them, and
`SandboxRecord.snapshot()` reports env KEYS only.
Tests: tests/providers/modal/test_modal_fake_controls.py
"""

from __future__ import annotations

import secrets as random
import signal
import string
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from grpclib import GRPCError, Status

from providers.modal.fake.sandboxes import Process
from providers.modal.fake.stats import Sampler

_Found = TypeVar("_Found")
TASK_ENV = "MODAL_TASK_ID"  # Modal sets it in every sandbox's container (its execs see it too)
_ALPHABET = string.digits + string.ascii_uppercase + string.ascii_lowercase


def new_id(prefix: str) -> str:
    """`prefix-` and 22 alphanumerics: the shape the SDK takes for a V1 object id."""
    return prefix + "-" + "".join(random.choice(_ALPHABET) for _ in range(22))


@dataclass
class SandboxRecord:
    id: str
    app_id: str
    task_id: str
    command: list[str]
    env: dict[str, str] = field(repr=False)
    image: dict[str, Any]
    gpu: str
    cpu: float
    memory: int
    region: list[str]
    timeout: int
    block_network: bool
    allowed_cidrs: list[str]
    allowed_domains: list[str] = field(default_factory=list)
    tags: dict[str, str] = field(default_factory=dict)
    created_at: float = field(default_factory=time.time)
    started_at: float = 0.0
    process: Process | None = None
    sampler: Sampler | None = None
    terminated: bool = False
    preemption: int = 0  # the TaskTerminationReason of a `FakeModal.preempt`; 0: not preempted

    @property
    def state(self) -> str:
        if self.process is None:
            return "terminated" if self.terminated else "pending"
        if not self.process.done.is_set():
            return "running"
        return self.process.ended_how

    @property
    def exit_code(self) -> int | None:
        return self.process.exit_code if self.process is not None else None

    def snapshot(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "app": self.app_id,
            "tags": dict(self.tags),
            "command": list(self.command),
            "env_keys": sorted(self.env),
            "image": dict(self.image),
            "gpu": self.gpu,
            "cpu": self.cpu,
            "memory": self.memory,
            "region": list(self.region),
            "timeout": self.timeout,
            "block_network": self.block_network,
            "allowed_cidrs": list(self.allowed_cidrs),
            "allowed_domains": list(self.allowed_domains),
            "state": self.state,
            "exit_code": self.exit_code,
            "pid": self.process.pid if self.process is not None else None,
        }


@dataclass
class ExecRecord:
    id: str
    task_id: str
    process: Process


class State:
    """Everything the fake knows. Lock `lock` for any read or write."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.apps: dict[tuple[str, str], str] = {}
        self.images: dict[str, dict[str, Any]] = {}
        self.secrets: dict[str, dict[str, str]] = {}
        self.sandboxes: dict[str, SandboxRecord] = {}
        self.tasks: dict[str, str] = {}
        self.execs: dict[str, ExecRecord] = {}
        self.connect_tokens: dict[str, str] = {}
        self.jwts: set[str] = set()
        self.queued = False
        self.is_outage = False
        self.failures: dict[str, list[tuple[int, str]]] = {}
        self.calls: list[str] = []

    def admit(self, method: str, *, authorized: Callable[[], bool], refusal: str) -> None:
        """The gate of one gRPC call, in this order: record the call, refuse it during an outage
        (UNAVAILABLE), refuse bad credentials (`authorized()` is read under the lock;
        UNAUTHENTICATED with `refusal`), then raise a failure injected for `method`."""
        with self.lock:
            self.calls.append(method)
            outage = self.is_outage
        if outage:
            raise GRPCError(Status.UNAVAILABLE, "fake modal: outage")
        with self.lock:
            known = authorized()
        if not known:
            raise GRPCError(Status.UNAUTHENTICATED, refusal)
        failure = self.take_failure(method)
        if failure is not None:
            raise GRPCError(Status(failure[0]), failure[1])

    def found(self, table: dict[str, _Found], key: str, what: str) -> _Found:
        """`table[key]`, read under the lock; gRPC NOT_FOUND (`<what> <key> not found`) if absent."""
        with self.lock:
            record = table.get(key)
        if record is None:
            raise GRPCError(Status.NOT_FOUND, f"{what} {key} not found")
        return record

    def start(self, record: SandboxRecord) -> None:
        """Start the sandbox's process now (pending -> running)."""
        with self.lock:
            if record.process is not None or record.terminated:
                return
            record.started_at = time.time()
            record.process = Process(
                record.command,
                {**record.env, TASK_ENV: record.task_id},
                timeout=record.timeout or None,
                container=True,
                on_end=lambda: self.end_execs(record.task_id),
            )
            record.sampler = Sampler(record.process.pid, record.process.done)

    def end_execs(self, task_id: str) -> None:
        """The sandbox of `task_id` ended: its execs die with its container (SIGKILL)."""
        with self.lock:
            ending = [e.process for e in self.execs.values() if e.task_id == task_id]
        for process in ending:
            process.end("killed", -signal.SIGKILL)

    def take_failure(self, method: str) -> tuple[int, str] | None:
        with self.lock:
            pending = self.failures.get(method)
            if not pending:
                return None
            return pending.pop(0)

    def processes(self) -> list[Process]:
        with self.lock:
            found = [r.process for r in self.sandboxes.values() if r.process is not None]
            return found + [e.process for e in self.execs.values()]
