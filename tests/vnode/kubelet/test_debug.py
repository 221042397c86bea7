"""`kubectl debug` end to end: real kubectl 1.37 and the image's kubectl add an ephemeral
container through the devcluster's `pods/ephemeralcontainers`, Nebula runs it as a new
process in the local instance, and kubectl attaches to it through the devcluster's proxy
and the kubelet listener; kubectl 1.20 gets the error a modern API server gives it; output
dropped for the budget (I7) is said by `kubectl logs` and an Event."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.support.clients.kubectl import KUBECTL_120, KUBECTL_137, KUBECTL_IMAGE, Rig
from tests.support.clients.terminal import on_a_terminal, type_until
from tests.support.polling import wait_for
from vnode.ephemeral.budget import MIB, OutputBudget

MODERN = {"kubectl-1.37": KUBECTL_137, "kubectl-image": KUBECTL_IMAGE}


def binary_for(name: str) -> str:
    binary = MODERN[name]
    if not os.path.exists(binary):
        pytest.fail(f"{binary} is missing (make tools)")
    return binary


def pod_json(rig: Rig) -> dict[str, Any]:
    done = rig.kubectl(KUBECTL_137, "get", "pod", rig.pod, "-o", "json")
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


def ephemeral_status(rig: Rig, name: str) -> dict[str, Any] | None:
    statuses = pod_json(rig)["status"].get("ephemeralContainerStatuses") or []
    return next((dict(s) for s in statuses if s["name"] == name), None)


def terminated(rig: Rig, name: str) -> dict[str, Any] | None:
    state = (ephemeral_status(rig, name) or {}).get("state") or {}
    ended = state.get("terminated")
    return dict(ended) if ended else None


@pytest.mark.parametrize("websockets", [True, False], ids=["websocket", "spdy"])
@pytest.mark.parametrize("client", list(MODERN))
def test_debug_i_runs_a_shell_whose_output_comes_back(client: str, websockets: bool, rig: Rig) -> None:
    name = f"dbg-{client.replace('.', '')}-{'ws' if websockets else 'spdy'}"
    done = rig.kubectl(
        binary_for(client),
        "debug",
        rig.pod,
        "--image=busybox",
        f"--container={name}",
        "-i",
        "--",
        "sh",
        input=b"echo marker-$((6*7)) in $PWD; exit 0\n",
        websockets=websockets,
    )
    assert done.returncode == 0, done.stderr
    assert b"marker-42 in " in done.stdout
    ended = wait_for(lambda: terminated(rig, name), 30, 0.2)
    assert ended["exitCode"] == 0 and ended["reason"] == "Completed" and ended["finishedAt"]
    spec = next(c for c in pod_json(rig)["spec"]["ephemeralContainers"] if c["name"] == name)
    assert spec["stdin"] is True and spec["command"] == ["sh"]
    # Its output is kept: `kubectl logs -c` shows it after the process ended.
    logs = rig.kubectl(KUBECTL_137, "logs", rig.pod, "-c", name)
    assert logs.returncode == 0, logs.stderr
    assert b"marker-42" in logs.stdout
    again = rig.kubectl(KUBECTL_137, "logs", rig.pod, "-c", name, "--previous")
    assert again.returncode != 0 and b"previous terminated container" in again.stderr


@pytest.mark.parametrize("client", list(MODERN))
def test_debug_it_with_target_opens_a_shell_on_a_terminal(client: str, rig: Rig) -> None:
    name = f"tty-{client.replace('.', '')}"
    env = dict(os.environ, KUBECONFIG=rig.kubeconfig, HOME=str(Path(rig.kubeconfig).parent))
    argv = [binary_for(client), "debug", "-it", rig.pod, "--image=busybox", "--target=main", f"-c={name}", "--", "sh"]
    with on_a_terminal(argv, env) as (master, session):
        assert b"77-ok" in type_until(master, b"echo $((7*11))-ok\r", b"77-ok", retry=True)
        assert b"24 80" in type_until(master, b"stty size\r", b"24 80", retry=True)
        os.write(master, b"exit 0\r")
        assert session.wait(timeout=30) == 0
    ended = wait_for(lambda: terminated(rig, name), 30, 0.2)
    assert ended["exitCode"] == 0
    spec = next(c for c in pod_json(rig)["spec"]["ephemeralContainers"] if c["name"] == name)
    assert spec["targetContainerName"] == "main" and spec["tty"] is True


def test_a_running_ephemeral_container_reports_running_and_its_logs_follow(rig: Rig) -> None:
    """Added by a patch (as kubectl does), without stdin: it runs at once, logs show it."""
    script = "i=0; while true; do i=$((i+1)); echo tick $i; sleep 0.1; done"
    body = {"spec": {"ephemeralContainers": [{"name": "ticker", "image": "busybox", "command": ["sh", "-c", script]}]}}
    done = rig.kubectl(
        KUBECTL_137, "patch", "pod", rig.pod, "--subresource=ephemeralcontainers", "-p", json.dumps(body)
    )
    assert done.returncode == 0, done.stderr
    status = wait_for(
        lambda: (ephemeral_status(rig, "ticker") or {}).get("state", {}).get("running")
        and ephemeral_status(rig, "ticker"),
        30,
        0.2,
    )
    assert status["containerID"].endswith("/ticker") and status["restartCount"] == 0 and status["ready"] is False
    wait_for(lambda: b"tick 5\n" in rig.kubectl(KUBECTL_137, "logs", rig.pod, "-c", "ticker").stdout, 30, 0.2)
    tail = rig.kubectl(KUBECTL_137, "logs", rig.pod, "-c", "ticker", "--tail=2")
    assert tail.returncode == 0 and len(tail.stdout.splitlines()) == 2
    # An exec into it runs in its target's context (here the first app container's).
    inside = rig.kubectl(KUBECTL_137, "exec", rig.pod, "-c", "ticker", "--", "sh", "-c", "echo in-$((3*3))")
    assert inside.returncode == 0 and inside.stdout == b"in-9\n", inside.stderr
    stamped = rig.kubectl(KUBECTL_137, "logs", rig.pod, "-c", "ticker", "--timestamps")
    assert stamped.returncode != 0 and b"timestamps and since are not kept" in stamped.stderr


def test_kubectl_120_gets_the_error_a_modern_server_gives(rig: Rig) -> None:
    """kubectl 1.20 speaks the alpha `EphemeralContainers` kind; kube-apiserver 1.22+ refuses it."""
    if not os.path.exists(KUBECTL_120):
        pytest.fail(f"{KUBECTL_120} is missing (make tools)")
    done = rig.kubectl(KUBECTL_120, "debug", rig.pod, "--image=busybox", "-i", "--", "sh", input=b"exit 0\n")
    assert done.returncode == 1
    assert b"error updating ephemeral containers" in done.stderr
    assert (
        b'no kind \\"EphemeralContainers\\" is registered' in done.stderr
        or b'no kind "EphemeralContainers"' in done.stderr
    )
    assert b"panic" not in done.stderr


def test_I7_kubectl_logs_of_a_debug_container_whose_output_was_dropped_says_so(rig: Rig) -> None:
    """Two debug containers past a 1 MiB budget: the first one's output is dropped, with an
    Event naming it, and `kubectl logs -c` of it says why instead of showing nothing."""
    ephemerals = rig.runner.handler.ephemerals
    kept_budget, ephemerals.budget = ephemerals.budget, OutputBudget(MIB)
    try:
        for name in ("spill-a", "spill-b"):
            script = f"yes 'output of {name}' | head -c 700000; echo; echo done {name}"
            body = {
                "spec": {"ephemeralContainers": [{"name": name, "image": "busybox", "command": ["sh", "-c", script]}]}
            }
            done = rig.kubectl(
                KUBECTL_137, "patch", "pod", rig.pod, "--subresource=ephemeralcontainers", "-p", json.dumps(body)
            )
            assert done.returncode == 0, done.stderr
            wait_for(lambda: terminated(rig, name), 30, 0.2)  # noqa: B023 (waited for at once)
        dropped = rig.kubectl(KUBECTL_137, "logs", rig.pod, "-c", "spill-a")
        assert dropped.returncode != 0 and dropped.stdout == b""
        assert b'"spill-a": its output (700014 bytes) was dropped' in dropped.stderr
        assert b"EPHEMERAL_OUTPUT_BUDGET" in dropped.stderr
        kept = rig.kubectl(KUBECTL_137, "logs", rig.pod, "-c", "spill-b", "--tail=1")
        assert kept.returncode == 0 and kept.stdout == b"done spill-b\n", kept.stderr

        def event() -> str:
            listed = rig.kubectl(
                KUBECTL_137, "get", "events", "--field-selector", "reason=EphemeralOutputDropped", "-o", "json"
            )
            return " ".join(str(e.get("message")) for e in json.loads(listed.stdout or b"{}").get("items") or [])

        message = wait_for(event, 30, 0.2)
        assert 'ephemeral container "spill-a": its kept output (700014 bytes) was dropped' in message
    finally:
        ephemerals.budget = kept_budget
