"""The fake cloud's JSON wire format: seam values and errors to and from plain dicts.

Used by the HTTP service (encode answers, decode requests) and its client (the
reverse). A provision request crosses with env KEYS only and volumes by file path and
mode only: values and contents never leave the manager (I4). Decoding raises
ValueError/KeyError/TypeError on a malformed body.
Tests: tests/providers/fake/test_fake_http.py.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import asdict
from datetime import datetime
from typing import Any

from providers import base, errors
from providers.egress import Egress, EgressMode
from providers.fake.logs import LogChunk, LogLine
from providers.fake.process import FinishedProcess
from providers.notices import Notice, NoticeKind
from providers.shape import ContainerFacts, ContainerSpec, ContainerState, Mount, Volume, VolumeFile

ERROR_STATUS: Mapping[type[errors.ProviderError], int] = {
    errors.NotFound: 404,
    errors.InvalidRequest: 400,
    errors.NotSupported: 400,
    errors.Unauthorized: 403,
    errors.NoCapacity: 409,
    errors.QuotaExceeded: 409,
    errors.Refused: 409,
    errors.Unavailable: 503,
}
_ERROR_TYPES = {cls.__name__: cls for cls in ERROR_STATUS}
MAX_OUTPUT = 1 << 20  # bytes of an exec's stdout (and of its stderr) an answer carries


def pod_to_json(pod: base.PodSpec) -> dict[str, Any]:
    return {
        "namespace": pod.namespace,
        "name": pod.name,
        "uid": pod.uid,
        "container": pod.container,
        "image": pod.image,
        "command": list(pod.command),
        "args": list(pod.args),
        "working_dir": pod.working_dir,
        "ports": list(pod.ports),
        "cpu": pod.cpu,
        "memory": pod.memory,
        "accelerator": pod.accelerator,
        "gpu_count": pod.gpu_count,
        "labels": dict(pod.labels),
        "annotations": dict(pod.annotations),
        "stdin": pod.stdin,
        "containers": [_container_to_json(c) for c in pod.containers],
        "init_containers": [_container_to_json(c) for c in pod.init_containers],
        "restart_policy": pod.restart_policy,
    }


def pod_from_json(data: Mapping[str, Any]) -> base.PodSpec:
    return base.PodSpec(
        namespace=str(data["namespace"]),
        name=str(data["name"]),
        uid=str(data["uid"]),
        container=str(data.get("container", "")),
        image=str(data.get("image", "")),
        command=tuple(str(x) for x in data.get("command") or ()),
        args=tuple(str(x) for x in data.get("args") or ()),
        working_dir=data.get("working_dir"),
        ports=tuple(int(p) for p in data.get("ports") or ()),
        cpu=None if data.get("cpu") is None else float(data["cpu"]),
        memory=None if data.get("memory") is None else int(data["memory"]),
        accelerator=data.get("accelerator"),
        gpu_count=int(data.get("gpu_count", 0)),
        labels={str(k): str(v) for k, v in (data.get("labels") or {}).items()},
        annotations={str(k): str(v) for k, v in (data.get("annotations") or {}).items()},
        stdin=bool(data.get("stdin", False)),
        containers=tuple(_container_from_json(c) for c in data.get("containers") or ()),
        init_containers=tuple(_container_from_json(c) for c in data.get("init_containers") or ()),
        restart_policy=str(data.get("restart_policy", "Always")),
    )


def _container_to_json(spec: ContainerSpec) -> dict[str, Any]:
    data = asdict(spec)
    data["mounts"] = [asdict(m) for m in spec.mounts]
    return data


def _container_from_json(data: Mapping[str, Any]) -> ContainerSpec:
    return ContainerSpec(
        name=str(data["name"]),
        image=str(data.get("image", "")),
        command=tuple(str(x) for x in data.get("command") or ()),
        args=tuple(str(x) for x in data.get("args") or ()),
        working_dir=data.get("working_dir"),
        ports=tuple(int(p) for p in data.get("ports") or ()),
        stdin=bool(data.get("stdin", False)),
        tty=bool(data.get("tty", False)),
        mounts=tuple(
            Mount(str(m["volume"]), str(m["path"]), str(m.get("sub_path", "")), bool(m.get("read_only", False)))
            for m in data.get("mounts") or ()
        ),
        sidecar=bool(data.get("sidecar", False)),
    )


def request_to_json(request: base.ProvisionRequest) -> dict[str, Any]:
    return {
        "claim": request.claim,
        "capacity_type": request.capacity_type.value if request.capacity_type else None,
        "region": request.region,
        "env_keys": sorted(request.env),
        "container_env_keys": {name: sorted(env) for name, env in request.container_env.items()},
        "volumes": [
            {
                "name": v.name,
                "kind": v.kind,
                "default_mode": v.default_mode,
                "files": [{"path": f.path, "mode": f.mode} for f in v.files],
            }
            for v in request.volumes
        ],
        "egress": {
            "mode": request.egress.mode.value,
            "cidrs": list(request.egress.cidrs),
            "domains": list(request.egress.domains),
        },
    }


def request_from_json(data: Mapping[str, Any]) -> base.ProvisionRequest:
    tier = data.get("capacity_type")
    return base.ProvisionRequest(
        claim=base.ClaimName(str(data["claim"])),
        capacity_type=base.Tier(tier) if tier else None,
        region=data.get("region"),
        env={str(k): "" for k in data.get("env_keys") or ()},
        container_env={
            str(name): {str(k): "" for k in keys} for name, keys in (data.get("container_env_keys") or {}).items()
        },
        volumes=tuple(
            Volume(
                name=str(v["name"]),
                kind=str(v["kind"]),
                files=tuple(VolumeFile(str(f["path"]), b"", int(f.get("mode", 0o644))) for f in v.get("files") or ()),
                default_mode=int(v.get("default_mode", 0o644)),
            )
            for v in data.get("volumes") or ()
        ),
        egress=_egress_from_json(data.get("egress") or {}),
    )


def _egress_from_json(data: Mapping[str, Any]) -> Egress:
    mode = EgressMode(str(data.get("mode") or EgressMode.OPEN.value))
    cidrs = tuple(str(c) for c in data.get("cidrs") or ())
    return Egress(mode, cidrs, tuple(str(d) for d in data.get("domains") or ()))


def result_to_json(result: base.ProvisionResult) -> dict[str, Any]:
    credential = None
    if result.credential is not None:
        credential = {k: base64.b64encode(v).decode() for k, v in result.credential.data.items()}
    return {
        "instance_id": result.instance_id,
        "reserved": result.reserved,
        "credential": credential,
        "endpoint": result.endpoint,
    }


def result_from_json(data: Mapping[str, Any]) -> base.ProvisionResult:
    raw = data.get("credential")
    credential = base.ConnectCredential({k: base64.b64decode(v) for k, v in raw.items()}) if raw else None
    return base.ProvisionResult(
        instance_id=base.InstanceId(str(data["instance_id"])),
        reserved=bool(data["reserved"]),
        credential=credential,
        endpoint=data.get("endpoint"),
    )


def instance_to_json(instance: base.Instance) -> dict[str, Any]:
    return {
        "id": instance.id,
        "claim": instance.claim,
        "state": instance.state.value,
        "created_at": instance.created_at.isoformat(),
        "endpoint": instance.endpoint,
        "started_at": _iso(instance.started_at),
        "finished_at": _iso(instance.finished_at),
        "exit_code": instance.exit_code,
        "message": instance.message,
        "region": instance.region,
        "capacity_type": instance.capacity_type.value if instance.capacity_type else None,
        "exit_reason": instance.exit_reason,
        "runs": instance.runs,
        "preempted": instance.preempted,
        "containers": [_facts_to_json(c) for c in instance.containers],
    }


def _facts_to_json(facts: ContainerFacts) -> dict[str, Any]:
    return {
        "name": facts.name,
        "state": facts.state.value,
        "init": facts.init,
        "started_at": _iso(facts.started_at),
        "finished_at": _iso(facts.finished_at),
        "exit_code": facts.exit_code,
        "exit_reason": facts.exit_reason,
        "message": facts.message,
        "runs": facts.runs,
    }


def _facts_from_json(data: Mapping[str, Any]) -> ContainerFacts:
    code = data.get("exit_code")
    return ContainerFacts(
        name=str(data["name"]),
        state=ContainerState(data["state"]),
        init=bool(data.get("init", False)),
        started_at=_from_iso(data.get("started_at")),
        finished_at=_from_iso(data.get("finished_at")),
        exit_code=None if code is None else int(code),
        exit_reason=str(data.get("exit_reason", "")),
        message=str(data.get("message", "")),
        runs=int(data.get("runs", 0)),
    )


def instance_from_json(data: Mapping[str, Any]) -> base.Instance:
    tier = data.get("capacity_type")
    return base.Instance(
        id=base.InstanceId(str(data["id"])),
        claim=base.ClaimName(str(data["claim"])),
        state=base.InstanceState(data["state"]),
        created_at=datetime.fromisoformat(data["created_at"]),
        endpoint=data.get("endpoint"),
        started_at=_from_iso(data.get("started_at")),
        finished_at=_from_iso(data.get("finished_at")),
        exit_code=data.get("exit_code"),
        message=str(data.get("message", "")),
        region=data.get("region"),
        capacity_type=base.Tier(tier) if tier else None,
        exit_reason=str(data.get("exit_reason", "")),
        runs=int(data.get("runs", 1)),
        preempted=bool(data.get("preempted", False)),
        containers=tuple(_facts_from_json(c) for c in data.get("containers") or ()),
    )


def offering_to_json(offering: base.Offering) -> dict[str, Any]:
    return {
        "accelerator": offering.accelerator,
        "gpu_count": offering.gpu_count,
        "tier": offering.tier.value,
        "region": offering.region,
        "hourly_price": offering.hourly_price,
        "available": offering.available,
        "instance_type": offering.instance_type,
    }


def offering_from_json(data: Mapping[str, Any]) -> base.Offering:
    return base.Offering(
        accelerator=data.get("accelerator"),
        gpu_count=int(data["gpu_count"]),
        tier=base.Tier(data["tier"]),
        region=str(data["region"]),
        hourly_price=data.get("hourly_price"),
        available=bool(data.get("available", True)),
        instance_type=str(data.get("instance_type", "")),
    )


def notice_to_json(notice: Notice) -> dict[str, Any]:
    return {
        "id": notice.id,
        "instance_id": notice.instance_id,
        "kind": notice.kind.value,
        "issued_at": notice.issued_at.isoformat(),
        "deadline": _iso(notice.deadline),
        "detail": notice.detail,
        "receipt": notice.receipt,
    }


def notice_from_json(data: Mapping[str, Any]) -> Notice:
    return Notice(
        id=str(data["id"]),
        instance_id=base.InstanceId(str(data["instance_id"])),
        kind=NoticeKind(data["kind"]),
        issued_at=datetime.fromisoformat(str(data["issued_at"])),
        deadline=_from_iso(data.get("deadline")),
        detail=str(data.get("detail", "")),
        receipt=str(data.get("receipt", "")),
    )


def chunk_to_json(chunk: LogChunk) -> dict[str, Any]:
    return {
        "lines": [[line.index, line.at, line.text] for line in chunk.lines],
        "total": chunk.total,
        "ended": chunk.ended,
    }


def chunk_from_json(data: Mapping[str, Any]) -> LogChunk:
    lines = tuple(LogLine(int(i), float(at), str(text)) for i, at, text in data["lines"])
    return LogChunk(lines=lines, total=int(data["total"]), ended=bool(data["ended"]))


def finished_to_json(process: FinishedProcess) -> dict[str, Any]:
    """An exec that ran to its end (over HTTP only commands without stdin or a terminal do)."""
    stdout, stderr = process.read_stdout(MAX_OUTPUT), process.read_stderr(MAX_OUTPUT)
    return {
        "stdout": base64.b64encode(stdout).decode(),
        "stderr": base64.b64encode(stderr).decode(),
        "exit_code": process.exit_code,
    }


def finished_from_json(data: Mapping[str, Any]) -> FinishedProcess:
    return FinishedProcess(base64.b64decode(data["stdout"]), base64.b64decode(data["stderr"]), int(data["exit_code"]))


def error_to_json(exc: errors.ProviderError) -> tuple[int, dict[str, Any]]:
    """The HTTP status and body for a provider error."""
    cls = next(c for c in type(exc).__mro__ if c in ERROR_STATUS or c is errors.ProviderError)
    body: dict[str, Any] = {"type": cls.__name__, "message": str(exc)}
    if isinstance(exc, errors.Unavailable):
        body["retry_after"] = exc.retry_after
    return ERROR_STATUS.get(cls, 500), {"error": body}


def error_from_json(status: int, data: Any) -> errors.ProviderError:
    """The provider error an answer stands for. 5xx is always Unavailable; an untyped
    answer too, because it does not say anything about the instance (I3)."""
    body = data.get("error") if isinstance(data, Mapping) else None
    kind = body.get("type") if isinstance(body, Mapping) else None
    message = str(body.get("message", "")) if isinstance(body, Mapping) else f"HTTP {status}"
    if status >= 500 or kind not in _ERROR_TYPES:
        retry = body.get("retry_after") if isinstance(body, Mapping) else None
        return errors.Unavailable(message or f"fake cloud answered HTTP {status}", retry_after=retry)
    return _ERROR_TYPES[kind](message)


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _from_iso(value: Any) -> datetime | None:
    return None if value is None else datetime.fromisoformat(str(value))
