"""A RunPod pod (an entry of `myself { pods }` or `pod(...)`) turned into the seam's facts.

Called by `RunPodProvider` for get and list. Pure. RunPod knows the container, not the
workload in it: `runtime` null is PROVISIONING (queued, pulling, restarting); a runtime with
no `started` file seen over SSH is INITIALIZING; a started workload RUNNING; its exit file
SUCCEEDED or FAILED with the code (`Verdict`, read by `provider._probe`). `desiredStatus`
EXITED on a pod Nebula never stops: an interruptible pod was reclaimed (TERMINATED,
preempted), an on-demand one was stopped outside Nebula (TERMINATED). TERMINATED pods are
gone (RunPod drops them from `myself.pods`).
Tests: tests/providers/runpod/test_runpod_provider.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from providers import base
from providers.runpod.identity import ENV_REGION, env_of, tier_of

PROXY = "https://{pod}-{port}.proxy.runpod.net"


@dataclass(frozen=True)
class Verdict:
    """What the pod's state files said over SSH: `started` the workload's start, `exit_code`
    and `finished` its end (None: not ended)."""

    started: datetime | None
    exit_code: int | None = None
    finished: datetime | None = None


def parse_probe(text: str) -> Verdict:
    started = finished = None
    code = None
    for line in text.splitlines():
        words = line.split()
        if len(words) >= 2 and words[0] == "started" and words[1].isdigit():
            started = datetime.fromtimestamp(int(words[1]), UTC)
        if len(words) >= 2 and words[0] == "exit" and words[1].lstrip("-").isdigit():
            code = int(words[1])
            finished = datetime.fromtimestamp(int(words[2]), UTC) if len(words) > 2 and words[2].isdigit() else None
    return Verdict(started, code, finished)


def has_runtime(pod: dict[str, Any]) -> bool:
    return bool(pod.get("runtime")) and str(pod.get("desiredStatus")) == "RUNNING"


def ssh_address(pod: dict[str, Any]) -> tuple[str, int] | None:
    """The public address of the pod's sshd (its port 22), if its runtime has one."""
    for port in (pod.get("runtime") or {}).get("ports") or ():
        if port.get("privatePort") == 22 and port.get("ip") and port.get("publicPort"):
            return str(port["ip"]), int(port["publicPort"])
    return None


def endpoint_of(pod: dict[str, Any]) -> str | None:
    """RunPod's proxy URL of the Pod's first declared port (declared ports are `/http`)."""
    for entry in str(pod.get("ports") or "").split(","):
        number, _, kind = entry.strip().partition("/")
        if kind == "http" and number.isdigit():
            return PROXY.format(pod=pod["id"], port=number)
    return None


def instance_from(
    pod: dict[str, Any], claim: base.ClaimName, created: datetime, verdict: Verdict | None, *, ssh: bool
) -> base.Instance:
    tier = tier_of(pod)
    known = base.Instance(
        id=base.InstanceId(str(pod["id"])),
        claim=claim,
        state=base.InstanceState.PROVISIONING,
        created_at=created,
        endpoint=endpoint_of(pod),
        region=env_of(pod).get(ENV_REGION) or None,
        capacity_type=tier,
    )
    if verdict is not None and verdict.exit_code is not None:
        code = verdict.exit_code
        return _with(
            known,
            state=base.InstanceState.SUCCEEDED if code == 0 else base.InstanceState.FAILED,
            exit_code=code,
            exit_reason="Completed" if code == 0 else "Error",
            started_at=verdict.started or created,
            finished_at=verdict.finished,
            message=f"the workload exited with code {code}",
        )
    desired = str(pod.get("desiredStatus") or "")
    if desired == "EXITED":
        if tier is base.Tier.SPOT:
            return _with(
                known,
                state=base.InstanceState.TERMINATED,
                preempted=True,
                message="RunPod interrupted the spot pod (outbid or reclaimed)",
            )
        return _with(known, state=base.InstanceState.TERMINATED, message="the pod was stopped outside Nebula")
    if desired == "TERMINATED":
        return _with(known, state=base.InstanceState.TERMINATED, message="the pod was terminated")
    if not has_runtime(pod):
        return known
    if not ssh:
        return _with(known, state=base.InstanceState.RUNNING, started_at=created)
    if verdict is not None and verdict.started is not None:
        return _with(known, state=base.InstanceState.RUNNING, started_at=verdict.started)
    return _with(known, state=base.InstanceState.INITIALIZING)


def _with(known: base.Instance, **changes: Any) -> base.Instance:
    from dataclasses import replace

    return replace(known, **changes)
