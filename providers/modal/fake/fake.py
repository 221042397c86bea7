"""Test infrastructure: `FakeModal`, the fake Modal server's handle and controls.

The grpclib server (control plane and command router on one 127.0.0.1 port) runs on its own
asyncio loop in a background thread. Controls act on the Python object, never over gRPC.
Tests: tests/providers/modal/test_modal_fake_controls.py
"""

from __future__ import annotations

import asyncio
import secrets as random
import threading
from types import TracebackType
from typing import Any

from grpclib.const import Status
from grpclib.server import Server
from modal_proto import api_pb2

from providers.modal.fake.router import Router
from providers.modal.fake.server import ControlPlane
from providers.modal.fake.state import State


class _Server(Server):
    """A grpclib server that also closes its open connections when it stops (Python 3.11's
    asyncio server leaves accepted sockets open)."""

    def __init__(self, handlers: list[Any]) -> None:
        super().__init__(handlers)
        self.transports: list[asyncio.BaseTransport] = []

    def _protocol_factory(self) -> Any:
        protocol: Any = super()._protocol_factory()
        made = protocol.connection_made

        def connection_made(transport: asyncio.BaseTransport) -> None:
            self.transports.append(transport)
            made(transport)

        protocol.connection_made = connection_made
        return protocol


class FakeModal:
    """A running fake Modal API server; see the package docstring."""

    def __init__(self, token_id: str, token_secret: str) -> None:
        self.token_id = token_id
        self.token_secret = token_secret
        self.state = State()
        self._loop = asyncio.new_event_loop()
        self._server: _Server | None = None
        started = threading.Event()
        self._port = 0

        async def serve() -> None:
            plane = ControlPlane(self.state, token_id, token_secret, router_url="")
            self._server = _Server([plane, Router(self.state)])
            await self._server.start("127.0.0.1", 0)
            sockets: Any = getattr(self._server._server, "sockets", None) or ()
            self._port = sockets[0].getsockname()[1]
            plane.router_url = f"http://127.0.0.1:{self._port}"
            started.set()

        self._thread = threading.Thread(target=self._run, args=(serve,), daemon=True, name="fake-modal")
        self._thread.start()
        if not started.wait(10):
            raise RuntimeError("fake modal did not start")
        self.url = f"http://127.0.0.1:{self._port}"

    def __repr__(self) -> str:
        return f"FakeModal(url={self.url!r})"

    def _run(self, serve: Any) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(serve())
        self._loop.run_forever()

    # --- controls -------------------------------------------------------------------------
    def queue(self, on: bool = True) -> None:
        """While on, new sandboxes stay pending; turning it off starts every pending one."""
        with self.state.lock:
            self.state.queued = on
            pending = [r for r in self.state.sandboxes.values() if r.process is None and not r.terminated]
        if not on:
            for record in pending:
                self.state.start(record)

    def release(self, sandbox_id: str) -> None:
        """Start one pending sandbox."""
        with self.state.lock:
            record = self.state.sandboxes[sandbox_id]
        self.state.start(record)

    def fail_next(self, method_name: str, grpc_status: Status | int, message: str = "", times: int = 1) -> None:
        """The next `times` calls of RPC `method_name` answer `grpc_status` with `message`."""
        with self.state.lock:
            self.state.failures.setdefault(method_name, []).extend([(Status(grpc_status).value, message)] * times)

    def outage(self, on: bool = True) -> None:
        """While on, every RPC answers UNAVAILABLE."""
        with self.state.lock:
            self.state.is_outage = on

    def sandboxes(self) -> list[dict[str, Any]]:
        """Snapshot of every sandbox record (env keys only), oldest first."""
        with self.state.lock:
            return [r.snapshot() for r in sorted(self.state.sandboxes.values(), key=lambda r: r.created_at)]

    def kill(self, sandbox_id: str, code: int) -> None:
        """End the sandbox's process as if it had exited with `code`."""
        with self.state.lock:
            record = self.state.sandboxes[sandbox_id]
        if record.process is not None:
            record.process.end("exited", code)
            record.process.done.wait(10)

    def preempt(self, sandbox_id: str, reason: str = "TASK_TERMINATION_REASON_WORKER_PREEMPTED") -> None:
        """Modal takes the running sandbox's worker back: its container is killed (137) and its
        task's result says so (INTERNAL_FAILURE, the exception naming `reason`, a
        `TaskTerminationReason` name), in SandboxList, SandboxWait and SandboxGetTaskId.
        Nothing is said ahead: Modal's wire has no notice. ValueError unless it runs."""
        value = api_pb2.TaskTerminationReason.Value(reason)
        with self.state.lock:
            record = self.state.sandboxes[sandbox_id]
            process = record.process
            if process is None or process.done.is_set():
                raise ValueError(f"fake modal: sandbox {sandbox_id} is not running")
            record.preemption = value
        process.end("preempted", 137)
        process.done.wait(10)

    def calls(self) -> list[str]:
        """Names of the RPCs received so far, in order."""
        with self.state.lock:
            return list(self.state.calls)

    # --- lifecycle ------------------------------------------------------------------------
    def close(self) -> None:
        """Stop the server and kill every process it started."""
        for process in self.state.processes():
            process.end("terminated", 137)
        server = self._server

        async def stop() -> None:
            if server is not None:
                server.close()
                for transport in server.transports:
                    transport.close()
                await server.wait_closed()
                await asyncio.sleep(0)

        if self._loop.is_running():
            asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self._loop.close()
        for process in self.state.processes():
            process.done.wait(5)

    def __enter__(self) -> FakeModal:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


def start_fake_modal(*, token_id: str = "ak-fake", token_secret: str = "", _: None = None) -> FakeModal:
    """Start a fake Modal server; `token_secret` defaults to a random one."""
    return FakeModal(token_id, token_secret or "as-" + random.token_hex(12))
