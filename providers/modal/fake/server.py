"""Test infrastructure: the fake Modal control plane, a grpclib service built on the SDK's own
`modal_proto.api_grpc.ModalClientBase`; every method not listed in the package docstring
answers UNIMPLEMENTED.

Every call passes `_guard`: an outage answers UNAVAILABLE, a wrong or missing
`x-modal-token-id`/`x-modal-token-secret` answers UNAUTHENTICATED (the SDK's AuthError), an
injected failure answers its status. Never logs a token or an env value.
Tests: tests/providers/modal/test_modal_fake_lifecycle.py
"""

from __future__ import annotations

import asyncio
import secrets as random
import time
from typing import Any

from google.protobuf import empty_pb2  # type: ignore[import-untyped]
from grpclib.const import Status
from grpclib.exceptions import GRPCError
from modal_proto import api_pb2
from modal_proto.api_grpc import ModalClientBase

from providers.modal.fake import jwt
from providers.modal.fake.applogs import count_response, fetch_response
from providers.modal.fake.logs import stream_logs
from providers.modal.fake.state import SandboxRecord, State, new_id
from providers.modal.fake.stats import stats_response

OK = api_pb2.GenericResult


def _unimplemented(name: str) -> Any:
    async def handler(self: Any, stream: Any) -> None:
        self.guard(stream, name)
        raise GRPCError(Status.UNIMPLEMENTED, f"fake modal: {name} is not implemented")

    return handler


_Base: Any = type(
    "_Base", (ModalClientBase,), {name: _unimplemented(name) for name in ModalClientBase.__abstractmethods__}
)


def result_of(record: SandboxRecord) -> api_pb2.GenericResult | None:
    """The sandbox's GenericResult once it ended, else None."""
    process = record.process
    if process is None:
        if record.terminated:
            return api_pb2.GenericResult(status=OK.GENERIC_STATUS_TERMINATED, exitcode=137)
        return None
    if not process.done.is_set():
        return None
    code = process.exit_code if process.exit_code is not None else -1
    if process.ended_how == "exited" and code < -1:  # killed by a signal: the shell's 128 + N
        code = 128 - code
    if process.ended_how == "preempted":
        # Modal took the worker back: an internal failure (what the SDK retries as "lost inputs
        # or worker preemption"), its exception naming the task's termination reason.
        reason = api_pb2.TaskTerminationReason.Name(record.preemption)
        return api_pb2.GenericResult(
            status=OK.GENERIC_STATUS_INTERNAL_FAILURE, exitcode=code, exception=f"the task was preempted ({reason})"
        )
    status = {
        "terminated": OK.GENERIC_STATUS_TERMINATED,
        "timeout": OK.GENERIC_STATUS_TIMEOUT,
    }.get(process.ended_how, OK.GENERIC_STATUS_SUCCESS if code == 0 else OK.GENERIC_STATUS_FAILURE)
    return api_pb2.GenericResult(status=status, exitcode=code)


def _blocked(definition: Any) -> bool:
    """Blocked by the legacy `block_network` field or by `network_access` (SDK 1.6.4 sends BLOCKED)."""
    blocked = api_pb2.NetworkAccess.NetworkAccessType.BLOCKED
    return bool(definition.block_network) or definition.network_access.network_access_type == blocked


class ControlPlane(_Base):  # type: ignore[misc]
    def __init__(self, state: State, token_id: str, token_secret: str, router_url: str) -> None:
        self.state = state
        self._token = (token_id, token_secret)
        self.router_url = router_url

    def guard(self, stream: Any, method: str) -> None:
        md = stream.metadata or {}

        def authorized() -> bool:
            return (md.get("x-modal-token-id"), md.get("x-modal-token-secret")) == self._token

        self.state.admit(method, authorized=authorized, refusal="Invalid token")

    async def _recv(self, stream: Any, method: str) -> Any:
        self.guard(stream, method)
        return await stream.recv_message()

    def _sandbox(self, sandbox_id: str) -> SandboxRecord:
        return self.state.found(self.state.sandboxes, sandbox_id, "Sandbox")

    async def ClientHello(self, stream: Any) -> None:
        await self._recv(stream, "ClientHello")
        await stream.send_message(api_pb2.ClientHelloResponse())

    async def AuthTokenGet(self, stream: Any) -> None:
        await self._recv(stream, "AuthTokenGet")
        await stream.send_message(api_pb2.AuthTokenGetResponse(token=jwt.make(self.state, 3600)))

    async def EnvironmentGetOrCreate(self, stream: Any) -> None:
        req = await self._recv(stream, "EnvironmentGetOrCreate")
        name = req.deployment_name or "main"
        settings = api_pb2.EnvironmentSettings(image_builder_version="2025.06")
        metadata = api_pb2.EnvironmentMetadata(name=name, settings=settings)
        response = api_pb2.EnvironmentGetOrCreateResponse(environment_id=f"en-{name}", metadata=metadata)
        await stream.send_message(response)

    async def AppGetOrCreate(self, stream: Any) -> None:
        req = await self._recv(stream, "AppGetOrCreate")
        with self.state.lock:
            key = (req.environment_name or "main", req.app_name)
            app_id = self.state.apps.get(key)
            if app_id is None:
                if req.object_creation_type != api_pb2.OBJECT_CREATION_TYPE_CREATE_IF_MISSING:
                    raise GRPCError(Status.NOT_FOUND, f"App '{req.app_name}' not found")
                app_id = self.state.apps[key] = new_id("ap")
        await stream.send_message(api_pb2.AppGetOrCreateResponse(app_id=app_id))

    async def SecretGetOrCreate(self, stream: Any) -> None:
        req = await self._recv(stream, "SecretGetOrCreate")
        if req.deployment_name:
            raise GRPCError(Status.NOT_FOUND, f"Secret '{req.deployment_name}' not found")
        secret_id = new_id("st")
        with self.state.lock:
            self.state.secrets[secret_id] = dict(req.env_dict)
        metadata = api_pb2.SecretMetadata(keys=sorted(req.env_dict))
        await stream.send_message(api_pb2.SecretGetOrCreateResponse(secret_id=secret_id, metadata=metadata))

    async def ImageGetOrCreate(self, stream: Any) -> None:
        req = await self._recv(stream, "ImageGetOrCreate")
        image = req.image
        tag = ""
        for line in image.dockerfile_commands:
            if line.upper().startswith("FROM "):
                tag = line.split(None, 1)[1].strip()
        info = {
            "tag": tag,
            "registry_secret": bool(image.image_registry_config.secret_id),
            "registry_username": self._secret_value(image.image_registry_config.secret_id, "REGISTRY_USERNAME"),
            "dockerfile_commands": list(image.dockerfile_commands),
        }
        image_id = new_id("im")
        with self.state.lock:
            self.state.images[image_id] = info
        ok = api_pb2.GenericResult(status=OK.GENERIC_STATUS_SUCCESS)
        await stream.send_message(api_pb2.ImageGetOrCreateResponse(image_id=image_id, result=ok))

    def _secret_value(self, secret_id: str, key: str) -> str | None:
        with self.state.lock:
            return self.state.secrets.get(secret_id, {}).get(key) if secret_id else None

    async def ImageJoinStreaming(self, stream: Any) -> None:
        await self._recv(stream, "ImageJoinStreaming")
        ok = api_pb2.GenericResult(status=OK.GENERIC_STATUS_SUCCESS)
        await stream.send_message(api_pb2.ImageJoinStreamingResponse(result=ok, eof=True))

    async def SandboxCreate(self, stream: Any) -> None:
        req = await self._recv(stream, "SandboxCreate")
        d = req.definition
        with self.state.lock:
            env: dict[str, str] = {}
            for secret_id in d.secret_ids:
                env.update(self.state.secrets.get(secret_id, {}))
            image = dict(self.state.images.get(d.image_id, {"tag": "", "registry_secret": False}))
        gpu = d.resources.gpu_config
        gpu_name = (gpu.gpu_type or "") + (f":{gpu.count}" if gpu.count > 1 else "")
        record = SandboxRecord(
            id=new_id("sb"),
            app_id=req.app_id,
            task_id=new_id("ta"),
            command=list(d.entrypoint_args),
            env=env,
            image=image,
            gpu=gpu_name,
            cpu=d.resources.milli_cpu / 1000,
            memory=d.resources.memory_mb,
            region=list(d.scheduler_placement.regions),
            timeout=d.timeout_secs,
            block_network=_blocked(d),
            allowed_cidrs=list(d.network_access.allowed_cidrs),
            allowed_domains=list(d.network_access.allowed_domains),
            tags={t.tag_name: t.tag_value for t in req.tags},
        )
        with self.state.lock:
            self.state.sandboxes[record.id] = record
            self.state.tasks[record.task_id] = record.id
            queued = self.state.queued
        if not queued:
            self.state.start(record)
        metadata = api_pb2.SandboxHandleMetadata(app_id=record.app_id)
        await stream.send_message(api_pb2.SandboxCreateResponse(sandbox_id=record.id, metadata=metadata))

    async def _wait_done(self, record: SandboxRecord, timeout: float) -> api_pb2.GenericResult | None:
        deadline = time.monotonic() + max(timeout, 0)
        while (result := result_of(record)) is None and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        return result

    async def SandboxWait(self, stream: Any) -> None:
        req = await self._recv(stream, "SandboxWait")
        record = self._sandbox(req.sandbox_id)
        result = await self._wait_done(record, min(req.timeout, 50))
        metadata = api_pb2.SandboxHandleMetadata(app_id=record.app_id)
        if result is not None:
            metadata.result.CopyFrom(result)
        await stream.send_message(api_pb2.SandboxWaitResponse(result=result, metadata=metadata))

    async def SandboxGetTaskId(self, stream: Any) -> None:
        req = await self._recv(stream, "SandboxGetTaskId")
        record = self._sandbox(req.sandbox_id)
        deadline = time.monotonic() + min(req.timeout or 0, 50)
        while record.process is None and not record.terminated and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        result = result_of(record)
        started = record.process is not None
        await stream.send_message(
            api_pb2.SandboxGetTaskIdResponse(task_id=record.task_id if started else "", task_result=result)
        )

    def _info(self, record: SandboxRecord) -> api_pb2.SandboxInfo:
        task = api_pb2.TaskInfo(id=record.task_id, enqueued_at=record.created_at, sandbox_id=record.id)
        if record.started_at:
            task.started_at = record.started_at
        if (result := result_of(record)) is not None:
            task.result.CopyFrom(result)
            task.finished_at = time.time()
        return api_pb2.SandboxInfo(
            id=record.id,
            created_at=record.created_at,
            app_id=record.app_id,
            task_info=task,
            tags=[api_pb2.SandboxTag(tag_name=k, tag_value=v) for k, v in record.tags.items()],
            image_id="",
            regions=record.region,
            timeout_secs=record.timeout,
            metadata=api_pb2.SandboxHandleMetadata(app_id=record.app_id),
        )

    async def SandboxList(self, stream: Any) -> None:
        req = await self._recv(stream, "SandboxList")
        wanted = {t.tag_name: t.tag_value for t in req.tags}
        with self.state.lock:
            records = sorted(self.state.sandboxes.values(), key=lambda r: r.created_at, reverse=True)
        found = [
            r
            for r in records
            if (not req.app_id or r.app_id == req.app_id)
            and all(r.tags.get(k) == v for k, v in wanted.items())
            and (req.include_finished or result_of(r) is None)
            and (not req.before_timestamp or r.created_at < req.before_timestamp)
        ][:100]
        await stream.send_message(api_pb2.SandboxListResponse(sandboxes=[self._info(r) for r in found]))

    async def SandboxTagsSet(self, stream: Any) -> None:
        req = await self._recv(stream, "SandboxTagsSet")
        record = self._sandbox(req.sandbox_id)
        with self.state.lock:
            record.tags = {t.tag_name: t.tag_value for t in req.tags}
        await stream.send_message(empty_pb2.Empty())

    async def SandboxTagsGet(self, stream: Any) -> None:
        req = await self._recv(stream, "SandboxTagsGet")
        record = self._sandbox(req.sandbox_id)
        tags = [api_pb2.SandboxTag(tag_name=k, tag_value=v) for k, v in record.tags.items()]
        await stream.send_message(api_pb2.SandboxTagsGetResponse(tags=tags))

    async def SandboxTerminate(self, stream: Any) -> None:
        req = await self._recv(stream, "SandboxTerminate")
        record = self._sandbox(req.sandbox_id)
        existing = result_of(record)
        with self.state.lock:
            record.terminated = True
            if record.process is not None:
                record.process.end("terminated", 137)
        await stream.send_message(api_pb2.SandboxTerminateResponse(existing_result=existing))

    async def SandboxGetStats(self, stream: Any) -> None:
        req = await self._recv(stream, "SandboxGetStats")
        record = self._sandbox(req.sandbox_id)
        await stream.send_message(stats_response(record.sampler, record.created_at, req))

    async def SandboxGetLogs(self, stream: Any) -> None:
        req = await self._recv(stream, "SandboxGetLogs")
        await stream_logs(stream, self._sandbox(req.sandbox_id), req)

    def _records(self) -> list[SandboxRecord]:
        with self.state.lock:
            return list(self.state.sandboxes.values())

    async def AppFetchLogs(self, stream: Any) -> None:
        req = await self._recv(stream, "AppFetchLogs")
        await stream.send_message(fetch_response(self._records(), req))

    async def AppCountLogs(self, stream: Any) -> None:
        req = await self._recv(stream, "AppCountLogs")
        await stream.send_message(count_response(self._records(), req))

    async def SandboxStdinWrite(self, stream: Any) -> None:
        req = await self._recv(stream, "SandboxStdinWrite")
        record = self._sandbox(req.sandbox_id)
        if record.process is not None:
            record.process.write_stdin(req.input, req.eof)
        await stream.send_message(api_pb2.SandboxStdinWriteResponse())

    async def TaskGetCommandRouterAccess(self, stream: Any) -> None:
        req = await self._recv(stream, "TaskGetCommandRouterAccess")
        with self.state.lock:
            known = req.task_id in self.state.tasks
        if not known:
            raise GRPCError(Status.NOT_FOUND, f"Task {req.task_id} not found")
        token = jwt.make(self.state, 3600)
        await stream.send_message(api_pb2.TaskGetCommandRouterAccessResponse(jwt=token, url=self.router_url))

    async def SandboxCreateConnectToken(self, stream: Any) -> None:
        req = await self._recv(stream, "SandboxCreateConnectToken")
        record = self._sandbox(req.sandbox_id)
        token = random.token_urlsafe(24)
        with self.state.lock:
            self.state.connect_tokens[token] = record.id
        url = f"https://{record.id}.connect.fake-modal.invalid" + (f":{req.port}" if req.port else "")
        await stream.send_message(api_pb2.SandboxCreateConnectTokenResponse(url=url, token=token))
