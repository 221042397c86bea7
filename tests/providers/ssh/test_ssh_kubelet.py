"""End to end: kubectl -> the embedded API server's proxy -> the kubelet API -> a VM
provider whose logs, exec and port-forward go over SSH (`providers.ssh`) to a real sshd on loopback.

The "VM" is a fake-cloud instance whose endpoint is that sshd: its workload log is a
stamped file the test appends to, as the AWS user-data's `docker logs --timestamps` would.
"""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest

from providers.base import InstanceId, LogOptions, LogStream, PortConnection, Process
from providers.fake import FakeProvider
from providers.ssh import FileLog, open_forward, open_log_stream, start_process
from tests.support.clients.kubectl import KUBECTL_137
from tests.support.clients.terminal import check_exec_tty_resize
from tests.support.factories import make_pod
from tests.support.fixtures import kube_for
from tests.support.polling import wait_for
from tests.support.rigs.runners import make_runner
from tests.support.servers import echo as echoserver
from tests.support.servers.sshd import Sshd

POD = "vm-talker"


class SshVmProvider(FakeProvider):
    """A VM provider for tests: instances from a fake cloud, logs and exec over SSH to `sshd`."""

    def __init__(self, name: str, sshd: Sshd) -> None:
        super().__init__(name, {"cloud": f"sshvm-{uuid.uuid4().hex}"})
        self.sshd = sshd

    def workload_log(self, instance_id: str) -> FileLog:
        base = self.sshd.home / instance_id.replace("/", "_")
        return FileLog(f"{base}.log", f"{base}.exit", stamped=True)

    def logs(self, instance_id: InstanceId, options: LogOptions) -> LogStream:
        return open_log_stream(self.sshd.target(), self.workload_log(instance_id), options)

    def exec(
        self, instance_id: InstanceId, command: Sequence[str], *, tty: bool, stdin: bool, container: str = ""
    ) -> Process:
        return start_process(self.sshd.target(), command, tty=tty, stdin=stdin)

    def port_forward(self, instance_id: InstanceId, port: int) -> PortConnection:
        return open_forward(self.sshd.target(), port)


@dataclass
class Rig:
    kubeconfig: str
    provider: SshVmProvider
    log: FileLog

    def kubectl(
        self, *args: str, input: bytes | None = None, timeout: float = 60
    ) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run([KUBECTL_137, "--kubeconfig", self.kubeconfig, *args], input=input, capture_output=True,
                              timeout=timeout, env=self.env())  # fmt: skip

    def env(self) -> dict[str, str]:
        return dict(os.environ, KUBECONFIG=self.kubeconfig, HOME=os.path.dirname(self.kubeconfig), TERM="dumb")

    def write(self, *lines: str) -> None:
        with open(self.log.path, "a") as handle:
            for line in lines:
                handle.write(f"{datetime.now(UTC).strftime('%Y-%m-%dT%H:%M:%S.%f')}000Z {line}\n")


@pytest.fixture(scope="module")
def rig(sshd: Sshd, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    try:
        from devcluster import DevCluster
        from kube.client import path_for
        from vnode.kubelet.resolve import HandlerRegistry
        from vnode.kubelet.server import ListenerConfig, Listeners
    except ImportError as exc:
        pytest.skip(f"the kubelet API is not importable: {exc}")
    folder = tmp_path_factory.mktemp("sshvm")
    kubeconfig = str(folder / "kubeconfig")
    provider = SshVmProvider("sshvm", sshd)
    registry = HandlerRegistry()
    server = Listeners(registry, kubelet=ListenerConfig("127.0.0.1", 0), node_ip="127.0.0.1")
    server.start()
    try:
        with DevCluster(kubeconfig_path=kubeconfig, scheduler_interval=0.05) as cluster:
            assert cluster is not None
            runner = make_runner(cluster, provider, kubelet_port=server.kubelet_port, lease_renew_interval=0.5)
            runner.start()
            registry.add(runner.handler)
            try:
                kube = kube_for(cluster)
                kube.create(path_for("pods", namespace="default"), make_pod(POD, "sshvm", command=("sleep", "3600")))
                pods = path_for("pods", namespace="default", name=POD)
                wait_for(lambda: (kube.get(pods).get("status") or {}).get("phase") == "Running", 60)
                instance = wait_for(lambda: provider.list(), 60)[0]
                yield Rig(kubeconfig, provider, provider.workload_log(instance.id))
            finally:
                registry.remove(runner.handler)
                runner.stop(timeout=10)
                for instance in provider.list():
                    provider.terminate(instance.id)
    finally:
        server.stop()


def test_kubectl_exec_i_pipes_stdin_to_eof_over_ssh(rig: Rig) -> None:
    result = rig.kubectl("exec", "-i", POD, "--", "sh", "-c", "tr a-z A-Z; echo done", input=b"over ssh\n")
    assert result.returncode == 0, result.stderr[-500:]
    assert result.stdout == b"OVER SSH\ndone\n"


def test_kubectl_exec_reports_the_remote_exit_code_and_stderr(rig: Rig) -> None:
    result = rig.kubectl("exec", POD, "--", "sh", "-c", "echo out; echo err >&2; exit 5")
    assert result.returncode == 5
    assert result.stdout == b"out\n" and result.stderr.startswith(b"err\n")


def test_kubectl_exec_it_sees_the_terminal_size_and_its_resize(rig: Rig) -> None:
    check_exec_tty_resize([KUBECTL_137, "--kubeconfig", rig.kubeconfig, "exec", "-it", POD, "--", "sh"], rig.env())


def test_kubectl_logs_f_follows_the_vm_log_until_the_workload_exits(rig: Rig) -> None:
    rig.write("booted")
    whole = rig.kubectl("logs", POD)
    assert whole.returncode == 0 and whole.stdout.endswith(b"booted\n"), whole.stderr[-500:]
    follower = subprocess.Popen(
        [KUBECTL_137, "--kubeconfig", rig.kubeconfig, "logs", "-f", "--timestamps", POD], stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, env=rig.env(),
    )  # fmt: skip
    try:
        assert follower.stdout is not None
        got: list[bytes] = []
        reader = threading.Thread(target=lambda: got.extend(iter(follower.stdout.readline, b"")), daemon=True)  # type: ignore[union-attr]
        reader.start()
        wait_for(lambda: any(line.endswith(b" booted\n") for line in got), 30)
        rig.write("step 1", "step 2")
        wait_for(lambda: any(line.endswith(b" step 2\n") for line in got), 30)
        assert follower.poll() is None  # still following
        Path(rig.log.done_path or "").write_text("0\n")
        assert follower.wait(timeout=30) == 0
        reader.join(30)
        assert [line.split(b" ", 1)[1] for line in got] == [b"booted\n", b"step 1\n", b"step 2\n"]
        assert all(line[:4].isdigit() and line[10:11] == b"T" for line in got)
    finally:
        if follower.poll() is None:
            follower.kill()
        follower.communicate(timeout=30)


def send_then_half_close(conn: socket.socket, payload: bytes) -> None:
    conn.sendall(payload)
    conn.shutdown(socket.SHUT_WR)


def test_kubectl_port_forward_reaches_the_vms_loopback_over_ssh(rig: Rig) -> None:
    """The tunnel (kubectl 1.37's websocket), the kubelet's SPDY, then a direct-tcpip channel."""
    server = socket.create_server(("127.0.0.1", 0))
    port = int(server.getsockname()[1])

    def serve() -> None:
        with server:
            conn, _ = server.accept()
            echoserver.serve(conn)

    threading.Thread(target=serve, daemon=True).start()
    args = [
        KUBECTL_137,
        "--kubeconfig",
        rig.kubeconfig,
        "port-forward",
        "--address",
        "127.0.0.1",
        f"pod/{POD}",
        f":{port}",
    ]
    forward = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=rig.env())
    try:
        assert forward.stdout is not None
        line = forward.stdout.readline()
        assert line.startswith(b"Forwarding from 127.0.0.1:"), line
        local = int(line.split(b":")[1].split(b" ")[0])
        payload = os.urandom(1 << 20)
        with socket.create_connection(("127.0.0.1", local), timeout=60) as conn:
            sender = threading.Thread(target=send_then_half_close, args=(conn, payload))
            sender.start()
            received = b""
            while data := conn.recv(1 << 16):
                received += data
            sender.join(60)
        assert received == payload
    finally:
        forward.terminate()
        forward.communicate(timeout=30)
