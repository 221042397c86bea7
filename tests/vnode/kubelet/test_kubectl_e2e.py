"""End to end through the devcluster's proxy with real clients: kubectl 1.20 (SPDY), the
image's kubectl, kubectl 1.37 (websocket, and SPDY with websockets off) and the Python
client's websocket exec, against an in-process Runner on the local provider. One Pod
(`talker`, a line every 200 ms) serves every test of the module."""

from __future__ import annotations

import hashlib
import os
import random
import re
import select
import ssl
import subprocess
import time
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.stream import ws_client

from kube.client import Kube, NotFoundError, load_api_client, path_for
from tests.support.clients.kubectl import KUBECTL_120, KUBECTL_137, KUBECTL_IMAGE, Rig
from tests.support.clients.spdy import SpdyClient
from tests.support.clients.terminal import check_exec_tty_resize
from tests.support.factories import make_pod
from tests.support.polling import wait_for

CLIENTS = {
    "kubectl-1.20": (KUBECTL_120, True),
    "kubectl-image": (KUBECTL_IMAGE, True),
    "kubectl-1.37-websocket": (KUBECTL_137, True),
    "kubectl-1.37-spdy": (KUBECTL_137, False),
}
LINE = re.compile(rb"^line (\d+)$")
STAMPED = re.compile(rb"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z line \d+$")


@pytest.fixture(params=list(CLIENTS))
def kubectl(request: pytest.FixtureRequest, rig: Rig) -> Any:
    binary, websockets = CLIENTS[request.param]
    if not os.path.exists(binary):
        pytest.fail(f"{binary} is missing (make tools)")

    def run(*args: str, **kwargs: Any) -> subprocess.CompletedProcess[bytes]:
        return rig.kubectl(binary, *args, websockets=websockets, **kwargs)

    run.binary, run.websockets = binary, websockets  # type: ignore[attr-defined]
    return run


def lines(output: bytes) -> list[bytes]:
    return [line for line in output.split(b"\n") if line]


def test_logs_with_tail_limit_timestamps_and_since(kubectl: Any, rig: Rig) -> None:
    whole = kubectl("logs", rig.pod)
    assert whole.returncode == 0, whole.stderr
    assert all(LINE.match(line) for line in lines(whole.stdout)) and len(lines(whole.stdout)) >= 2
    tail = kubectl("logs", rig.pod, "--tail=3")
    assert len(lines(tail.stdout)) == 3 and all(LINE.match(line) for line in lines(tail.stdout))
    assert kubectl("logs", rig.pod, "--limit-bytes=5").stdout == b"line "
    stamped = kubectl("logs", rig.pod, "--timestamps", "--tail=2")
    assert len(lines(stamped.stdout)) == 2 and all(STAMPED.match(line) for line in lines(stamped.stdout))
    recent = kubectl("logs", rig.pod, "--since=2s")
    numbers = [int(LINE.match(line).group(1)) for line in lines(recent.stdout)]  # type: ignore[union-attr]
    newest = int(LINE.match(lines(kubectl("logs", rig.pod, "--tail=1").stdout)[0]).group(1))  # type: ignore[union-attr]
    assert numbers and 5 <= len(numbers) <= 13 and numbers[-1] <= newest  # ~10 lines in 2 s, not the backlog


def test_logs_follow_stays_open_and_streams_new_lines(kubectl: Any, rig: Rig) -> None:
    env = dict(os.environ, KUBECONFIG=rig.kubeconfig, HOME=os.path.dirname(rig.kubeconfig))
    follower = subprocess.Popen(
        [kubectl.binary, "--kubeconfig", rig.kubeconfig, "logs", "-f", "--tail=1", rig.pod],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
    )  # fmt: skip
    try:
        assert follower.stdout is not None
        seen: list[int] = []
        deadline = time.monotonic() + 30
        while len(seen) < 4 and time.monotonic() < deadline:
            line = follower.stdout.readline()
            match = LINE.match(line.strip())
            if match:
                seen.append(int(match.group(1)))
        assert len(seen) == 4 and seen == sorted(seen) and seen[-1] > seen[0]
        assert follower.poll() is None  # still following
    finally:
        follower.kill()
        follower.communicate(timeout=30)


def test_exec_round_trips_five_megabytes_of_stdin_byte_exact(kubectl: Any, rig: Rig) -> None:
    data = random.Random(5).randbytes(5 * 1024 * 1024)
    result = kubectl("exec", "-i", rig.pod, "--", "cat", input=data, timeout=120)
    assert result.returncode == 0, result.stderr[-500:]
    assert len(result.stdout) == len(data) and result.stdout == data


def test_exec_reports_the_exit_code_and_keeps_stdout_and_stderr_apart(kubectl: Any, rig: Rig) -> None:
    result = kubectl("exec", rig.pod, "--", "sh", "-c", "echo to-stdout; echo to-stderr >&2; exit 3")
    assert result.returncode == 3
    assert result.stdout == b"to-stdout\n"
    assert result.stderr.startswith(b"to-stderr\n") and b"command terminated with exit code 3" in result.stderr


def test_exec_with_a_terminal_sees_the_size_and_its_resize(kubectl: Any, rig: Rig) -> None:
    env = dict(os.environ, KUBECONFIG=rig.kubeconfig, HOME=os.path.dirname(rig.kubeconfig), TERM="dumb")
    if not kubectl.websockets:
        env["KUBECTL_REMOTE_COMMAND_WEBSOCKETS"] = "false"
    check_exec_tty_resize([kubectl.binary, "--kubeconfig", rig.kubeconfig, "exec", "-it", rig.pod, "--", "sh"], env)


def test_attach_streams_the_workloads_console(kubectl: Any, rig: Rig) -> None:
    env = dict(os.environ, KUBECONFIG=rig.kubeconfig, HOME=os.path.dirname(rig.kubeconfig))
    if not kubectl.websockets:
        env["KUBECTL_REMOTE_COMMAND_WEBSOCKETS"] = "false"
    attached = subprocess.Popen(
        [kubectl.binary, "--kubeconfig", rig.kubeconfig, "attach", "-i", rig.pod],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
    )  # fmt: skip
    try:
        assert attached.stdout is not None and attached.stdin is not None
        attached.stdin.write(b"ignored: the Pod has no stdin\n")
        attached.stdin.flush()
        first = second = None
        deadline = time.monotonic() + 30
        while second is None and time.monotonic() < deadline:
            match = LINE.match(attached.stdout.readline().strip())
            if match:
                first, second = (int(match.group(1)), None) if first is None else (first, int(match.group(1)))
        assert first is not None and second is not None and second > first
    finally:
        attached.kill()
        attached.communicate(timeout=30)


def _echoer(rig: Rig) -> str:
    """A Pod whose container has `stdin: true` and echoes each line it reads (made once)."""
    kube = Kube(load_api_client(rig.kubeconfig))
    try:
        kube.get(path_for("pods", namespace="default", name="echoer"))
    except NotFoundError:
        script = 'while read -r line; do echo "echo $line"; done'
        kube.create(
            path_for("pods", namespace="default"),
            make_pod("echoer", "local", command=("sh", "-c", script), container={"stdin": True}),
        )
    wait_for(
        lambda: kube.get(path_for("pods", namespace="default", name="echoer"))["status"].get("phase") == "Running", 60
    )
    return "echoer"


def test_attach_i_writes_to_the_workloads_stdin(kubectl: Any, rig: Rig) -> None:
    """`kubectl attach -i` reaches the stdin of a container that asked for one."""
    pod = _echoer(rig)
    env = dict(os.environ, KUBECONFIG=rig.kubeconfig, HOME=os.path.dirname(rig.kubeconfig))
    if not kubectl.websockets:
        env["KUBECTL_REMOTE_COMMAND_WEBSOCKETS"] = "false"
    attached = subprocess.Popen(
        [kubectl.binary, "--kubeconfig", rig.kubeconfig, "attach", "-i", pod],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
    )  # fmt: skip
    word = f"hello-{random.randrange(10**9)}"
    try:
        assert attached.stdout is not None and attached.stdin is not None
        deadline = time.monotonic() + 30
        seen = b""
        while f"echo {word}".encode() not in seen and time.monotonic() < deadline:
            attached.stdin.write(f"{word}\n".encode())  # again until attached: early bytes may predate it
            attached.stdin.flush()
            if select.select([attached.stdout], [], [], 1.0)[0]:
                seen += os.read(attached.stdout.fileno(), 65536)
        assert f"echo {word}".encode() in seen
    finally:
        attached.kill()
        attached.communicate(timeout=30)


def _ws_config(rig: Rig) -> Any:
    config = k8s.Configuration()
    config.host = f"https://127.0.0.1:{rig.server.kubelet_port}"
    config.verify_ssl = False
    return config


def _ws_exec(rig: Rig, query: str, stdin: bytes | None = None) -> Any:
    url = f"wss://127.0.0.1:{rig.server.kubelet_port}/exec/default/{rig.pod}/main?{query}"
    client = ws_client.WSClient(_ws_config(rig), url, headers=None, capture_all=True)
    try:
        if stdin is not None:
            for start in range(0, len(stdin), 32768):
                client.write_stdin(stdin[start : start + 32768])
            client.close_channel(0)
        client.run_forever(timeout=60)
        return client.read_stdout(), client.read_stderr(), client.returncode
    finally:
        client.close()
        client.sock.shutdown()


def test_the_python_clients_websocket_exec_against_the_kubelet_url(rig: Rig) -> None:
    data = random.Random(7).randbytes(5 * 1024 * 1024)
    stdout, _, code = _ws_exec(rig, "command=sha256sum&input=1&output=1&error=1", stdin=data)
    assert code == 0 and stdout.split()[0] == hashlib.sha256(data).hexdigest()
    stdout, stderr, code = _ws_exec(
        rig, "command=sh&command=-c&command=echo+a%3B+echo+b+%3E%262%3B+exit+3&output=1&error=1"
    )
    assert (stdout, stderr, code) == ("a\n", "b\n", 3)


def test_a_client_that_disconnects_kills_the_remote_process(rig: Rig) -> None:
    path = f"/exec/default/{rig.pod}/main?command=sh&command=-c&command=echo+%24%24%3B+exec+sleep+300&output=1&error=1"
    tls = ssl._create_unverified_context()
    with SpdyClient.connect(("127.0.0.1", rig.server.kubelet_port), path, ssl_context=tls) as client:
        streams = client.open_exec()
        client.wait_for(lambda: client.received(streams["stdout"]).endswith(b"\n"), "the pid")
        pid = int(client.received(streams["stdout"]))
        os.kill(pid, 0)  # running
    wait_for(lambda: not _alive(pid), 30)


def _alive(pid: int) -> bool:
    """Running (not a zombie). The process may be reaped between the two looks, and /proc
    then answers ENOENT or ESRCH: gone."""
    try:
        os.kill(pid, 0)
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[1][0] != "Z"
    except (ProcessLookupError, FileNotFoundError):
        return False


def test_logs_previous_serves_the_run_before_the_restart_and_the_kubelets_error_without_one(
    kubectl: Any, rig: Rig, tmp_path: Any
) -> None:
    kube = Kube(load_api_client(rig.kubeconfig))
    name = f"crasher-{random.randrange(10**6)}"
    counter = tmp_path / "runs"
    script = f'n=$(cat {counter} 2>/dev/null || echo 0); n=$((n+1)); echo $n > {counter}; echo "run $n"; exit 1'
    kube.create(path_for("pods", namespace="default"), make_pod(name, "local", command=("sh", "-c", script)))
    try:

        def restarted() -> bool:
            statuses = kube.get(path_for("pods", namespace="default", name=name))["status"].get("containerStatuses")
            return bool(statuses) and statuses[0].get("restartCount", 0) >= 1

        wait_for(restarted, 60, what="one restart (the first is at once)")
        previous = kubectl("logs", name, "--previous")
        assert previous.returncode == 0, previous.stderr
        assert re.fullmatch(rb"run \d+\n", previous.stdout), previous.stdout
        none = kubectl("logs", rig.pod, "--previous")
        assert none.returncode != 0
        assert b'previous terminated container "main" in pod "talker" not found' in none.stderr
    finally:
        try:
            kube.delete(path_for("pods", namespace="default", name=name))
        except NotFoundError:
            pass
