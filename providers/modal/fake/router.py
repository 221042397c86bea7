"""Test infrastructure: the fake Modal's task command router (exec), a grpclib service on the
SDK's own `task_command_router_grpc.TaskCommandRouterBase`, served on the control plane's
port. Calls need `authorization: Bearer <jwt>` with a JWT the fake issued. Each exec is a
real child process (under a pty when `pty_info.enabled`, sized by winsz rows/cols) whose env
is the sandbox's plus the request's; stdio is read by byte offset per file descriptor, stdin
written by offset (repeats are ignored), and Wait/Poll give the exit code, or the signal
that killed it (the SDK reads 128 + N).
Tests: tests/providers/modal/test_modal_fake_exec.py
"""

from __future__ import annotations

import asyncio
from typing import Any

from grpclib.const import Status
from grpclib.exceptions import GRPCError
from modal_proto import task_command_router_pb2 as sr_pb2
from modal_proto.task_command_router_grpc import TaskCommandRouterBase

from providers.modal.fake.sandboxes import STDERR, STDOUT, Process
from providers.modal.fake.state import TASK_ENV, ExecRecord, State


def _unimplemented(name: str) -> Any:
    async def handler(self: Any, stream: Any) -> None:
        raise GRPCError(Status.UNIMPLEMENTED, f"fake modal router: {name} is not implemented")

    return handler


_Base: Any = type(
    "_Base",
    (TaskCommandRouterBase,),
    {name: _unimplemented(name) for name in TaskCommandRouterBase.__abstractmethods__},
)


class Router(_Base):  # type: ignore[misc]
    def __init__(self, state: State) -> None:
        self.state = state
        self._stdin_offsets: dict[str, int] = {}

    async def _recv(self, stream: Any, method: str) -> Any:
        auth = (stream.metadata or {}).get("authorization", "")

        def authorized() -> bool:
            return auth.startswith("Bearer ") and auth[7:] in self.state.jwts

        self.state.admit(method, authorized=authorized, refusal="invalid router token")
        return await stream.recv_message()

    def _exec(self, exec_id: str) -> ExecRecord:
        return self.state.found(self.state.execs, exec_id, "exec")

    async def TaskExecStart(self, stream: Any) -> None:
        req = await self._recv(stream, "TaskExecStart")
        with self.state.lock:
            sandbox_id = self.state.tasks.get(req.task_id)
            sandbox = self.state.sandboxes.get(sandbox_id or "")
            if sandbox is None or sandbox.process is None or sandbox.process.done.is_set():
                raise GRPCError(Status.NOT_FOUND, f"task {req.task_id} is not running")
            env, cwd = {**sandbox.env, TASK_ENV: sandbox.task_id}, sandbox.process.workdir
            for secret_id in req.secret_ids:
                env.update(self.state.secrets.get(secret_id, {}))
            for source in req.secret_sources:
                env.update(self.state.secrets.get(source.secret_id, {}) if source.secret_id else {})
                env.update(source.env.contents)
        env.update({e.key: e.value for e in req.env})
        pty = req.pty_info.enabled
        if pty and req.pty_info.env_term:
            env.setdefault("TERM", req.pty_info.env_term)
        size = (req.pty_info.winsz_rows, req.pty_info.winsz_cols) if pty else None
        process = Process(list(req.command_args), env, timeout=req.timeout_secs or None, pty=pty, cwd=cwd, size=size)
        with self.state.lock:
            self.state.execs[req.exec_id] = ExecRecord(id=req.exec_id, task_id=req.task_id, process=process)
        await stream.send_message(sr_pb2.TaskExecStartResponse())

    async def TaskExecStdinWrite(self, stream: Any) -> None:
        req = await self._recv(stream, "TaskExecStdinWrite")
        record = self._exec(req.exec_id)
        written = self._stdin_offsets.get(req.exec_id, 0)
        data = bytes(req.data)
        skip = max(0, written - req.offset)
        fresh = data[skip:]
        self._stdin_offsets[req.exec_id] = max(written, req.offset + len(data))
        record.process.write_stdin(fresh, req.eof)
        await stream.send_message(sr_pb2.TaskExecStdinWriteResponse())

    async def TaskExecStdinStatus(self, stream: Any) -> None:
        req = await self._recv(stream, "TaskExecStdinStatus")
        self._exec(req.exec_id)
        written = self._stdin_offsets.get(req.exec_id, 0)
        await stream.send_message(sr_pb2.TaskExecStdinStatusResponse(num_bytes_written=written))

    async def TaskExecStdioRead(self, stream: Any) -> None:
        req = await self._recv(stream, "TaskExecStdioRead")
        process = self._exec(req.exec_id).process
        fd = STDERR if req.file_descriptor == sr_pb2.TASK_EXEC_STDIO_FILE_DESCRIPTOR_STDERR else STDOUT
        sent = 0
        while True:
            finished = process.done.is_set() and process.output.closed
            data = b"".join(d for _, f, d in list(process.output.chunks) if f == fd)
            if len(data) > max(sent, req.offset):
                start = max(sent, req.offset)
                await stream.send_message(sr_pb2.TaskExecStdioReadResponse(data=data[start:]))
                sent = len(data)
            if finished:
                return
            await asyncio.sleep(0.02)

    async def _code(self, stream: Any, method: str, wait: bool) -> tuple[Any, int | None]:
        req = await self._recv(stream, method)
        process = self._exec(req.exec_id).process
        while wait and not process.done.is_set():
            await asyncio.sleep(0.02)
        return req, process.exit_code if process.done.is_set() else None

    async def TaskExecWait(self, stream: Any) -> None:
        _, code = await self._code(stream, "TaskExecWait", True)
        code = code if code is not None else 0
        response = sr_pb2.TaskExecWaitResponse(signal=-code) if code < -1 else sr_pb2.TaskExecWaitResponse(code=code)
        await stream.send_message(response)

    async def TaskExecPoll(self, stream: Any) -> None:
        _, code = await self._code(stream, "TaskExecPoll", False)
        response = sr_pb2.TaskExecPollResponse()
        if code is not None and code < -1:  # killed by a signal: Modal says which
            response.signal = -code
        elif code is not None:
            response.code = code
        await stream.send_message(response)
