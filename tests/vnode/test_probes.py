"""Probes against real things: TCP and HTTP(S) listeners on loopback, exec through the local
provider, timeouts, the worker pool's bound, and a verdict reaching the next poll tick."""

from __future__ import annotations

import http.server
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from providers.base import ClaimName, Instance, InstanceId, InstanceState, Process, ProvisionRequest
from providers.claim import claim_name
from providers.fake.process import ScriptedProcess
from providers.local import LocalProvider
from providers.podspec import pod_spec_from_dict
from tests.support.factories import make_pod
from tests.support.local_cleanup import kill_leftovers
from tests.support.polling import wait_for
from tests.support.rigs.offline import KeptEvents, offline_handler
from tests.support.servers.tls import TlsWsgiServer
from vnode.model import assess
from vnode.model.probespec import HttpAction, probes_of
from vnode.model.tracking import Tracked, TrackedMap
from vnode.probing.prober import Prober
from vnode.probing.probes import Outcome, Target, host_of, run_exec, run_http, run_probe, run_tcp


@pytest.mark.parametrize(
    ("endpoint", "host"),
    [
        ("10.0.0.7", "10.0.0.7"),
        ("10.0.0.7:22", "10.0.0.7"),
        ("ec2-3-4-5-6.compute.amazonaws.com", "ec2-3-4-5-6.compute.amazonaws.com"),
        ("::1", "::1"),
        ("[::1]:22", "::1"),
        ("https://box.example:8443/", "box.example"),
    ],
)
def test_the_probed_host_is_the_host_the_instances_endpoint_names(endpoint: str, host: str) -> None:
    assert host_of(endpoint) == host


# -- TCP ------------------------------------------------------------------------------------


def test_a_tcp_probe_succeeds_when_the_port_accepts() -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        assert run_tcp("127.0.0.1", listener.getsockname()[1], timeout=5) == Outcome(True)


def test_a_tcp_probe_fails_with_the_dial_error_when_nothing_listens() -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
    outcome = run_tcp("127.0.0.1", port, timeout=5)
    assert outcome == Outcome(False, f"dial tcp 127.0.0.1:{port}: connect: connection refused")


# -- HTTP -----------------------------------------------------------------------------------


class Site(http.server.ThreadingHTTPServer):
    """A loopback HTTP server answering each path with a status; it keeps what it was sent."""

    daemon_threads = True

    def __init__(self, answers: dict[str, tuple[int, dict[str, str]]]) -> None:
        self.answers = answers
        self.seen: list[tuple[str, dict[str, str]]] = []
        self.hold = threading.Event()  # set: a request to /slow waits for it
        super().__init__(("127.0.0.1", 0), _Answer)

    @property
    def port(self) -> int:
        return int(self.server_address[1])


class _Answer(http.server.BaseHTTPRequestHandler):
    server: Site

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.server.seen.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
        if self.path == "/slow":
            self.server.hold.wait(30)
        status, headers = self.server.answers.get(self.path, (404, {}))
        body = b"x" * 50_000 if status == 500 else b"ok"  # a failure's big body is not the message
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def site() -> Iterator[Site]:
    server = Site({"/ok": (200, {}), "/bad": (500, {}), "/moved": (302, {"Location": "/bad"})})
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield server
    server.hold.set()
    server.shutdown()
    server.server_close()
    thread.join()


def test_an_http_probe_succeeds_on_200_to_399_and_sends_the_pods_headers(site: Site) -> None:
    action = HttpAction(port=site.port, path="/ok", headers=(("X-Probe", "yes"), ("Host", "app.example")))
    assert run_http(action, "127.0.0.1", timeout=5) == Outcome(True)
    path, headers = site.seen[-1]
    assert path == "/ok" and headers["x-probe"] == "yes" and headers["host"] == "app.example"
    assert headers["user-agent"].startswith("kube-probe/")


def test_an_http_probe_fails_with_the_status_code_and_not_the_body(site: Site) -> None:
    outcome = run_http(HttpAction(port=site.port, path="/bad"), "127.0.0.1", timeout=5)
    assert outcome == Outcome(False, "HTTP probe failed with statuscode: 500")


def test_an_http_probe_follows_a_redirect_on_the_same_host(site: Site) -> None:
    outcome = run_http(HttpAction(port=site.port, path="/moved"), "127.0.0.1", timeout=5)
    assert outcome == Outcome(False, "HTTP probe failed with statuscode: 500")
    assert [path for path, _ in site.seen] == ["/moved", "/bad"]


def test_an_http_probe_that_gets_no_answer_within_its_timeout_fails(site: Site) -> None:
    outcome = run_http(HttpAction(port=site.port, path="/slow"), "127.0.0.1", timeout=0.3)
    assert outcome == Outcome(False, f'Get "http://127.0.0.1:{site.port}/slow": i/o timeout')


def test_an_https_probe_does_not_verify_the_certificate() -> None:
    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        start_response("204 No Content", [])
        return []

    with TlsWsgiServer(app) as server:
        port = int(server.url.rsplit(":", 1)[1])
        outcome = run_http(HttpAction(port=port, path="/", scheme="HTTPS"), "127.0.0.1", timeout=5)
    assert outcome == Outcome(True)


def test_a_named_port_resolves_to_the_containers_port_and_an_undeclared_one_errors(site: Site) -> None:
    ports = [{"name": "web", "containerPort": site.port}]
    pod = make_pod(container={"ports": ports, "readinessProbe": {"httpGet": {"port": "web", "path": "/ok"}}})
    pod["spec"]["containers"].append({"name": "b", "ports": ports, "livenessProbe": {"tcpSocket": {"port": "db"}}})
    web, db = probes_of(pod)
    target = Target(InstanceId("i-1"), "127.0.0.1")
    assert run_probe(web, target, executor=None) == Outcome(True)
    assert run_probe(db, target, executor=None) == Outcome(False, "port db not found", errored=True)


# -- exec through the local provider ----------------------------------------------------------


@pytest.fixture
def local(tmp_path: Path) -> Iterator[LocalProvider]:
    provider = LocalProvider("local", {"state_dir": str(tmp_path / "state"), "grace_period": 1})
    yield provider
    for instance in provider.list():
        provider.terminate(instance.id)
    kill_leftovers(tmp_path / "state")


def start_local(provider: LocalProvider, pod: dict[str, Any]) -> Instance:
    meta = pod["metadata"]
    request = ProvisionRequest(claim=claim_name(meta["namespace"], meta["name"], meta["uid"]))
    instance_id = provider.provision(pod_spec_from_dict(pod), request).instance_id
    running = wait_for(lambda: (i := provider.get(instance_id)) is not None and i.state is InstanceState.RUNNING and i)
    assert isinstance(running, Instance)
    return running


def local_pod(**container: Any) -> dict[str, Any]:
    return make_pod(f"p-{uuid.uuid4().hex[:6]}", namespace="default", uid=str(uuid.uuid4()),
                    command=("sleep", "300"), container=container)  # fmt: skip


def test_an_exec_probe_runs_in_the_local_instance_and_reports_the_commands_output(local: LocalProvider) -> None:
    instance = start_local(local, local_pod())
    ok = run_exec(local, instance.id, "main", ("sh", "-c", "echo fine"), timeout=10)
    failed = run_exec(local, instance.id, "main", ("sh", "-c", "echo not ready >&2; exit 3"), timeout=10)
    assert ok == Outcome(True, "fine") and failed == Outcome(False, "not ready")


def test_an_exec_probe_still_running_at_its_timeout_fails_and_its_process_is_closed(
    local: LocalProvider, tmp_path: Path
) -> None:
    instance = start_local(local, local_pod())
    pid_file = tmp_path / "probe.pid"
    command = ("sh", "-c", f"echo $$ > {pid_file}; exec sleep 60")
    outcome = run_exec(local, instance.id, "main", command, timeout=0.5)
    assert outcome == Outcome(False, f"command {' '.join(command)!r} timed out")
    pid = int(wait_for(lambda: pid_file.exists() and pid_file.read_text().strip()))

    def gone() -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False

    wait_for(gone, what="the timed-out probe's process to be gone")


def test_a_readiness_verdict_from_the_local_provider_queues_the_pod_for_a_flush(
    local: LocalProvider, tmp_path: Path
) -> None:
    flag = tmp_path / "ready"
    probe = {"exec": {"command": ["test", "-f", str(flag)]}, "periodSeconds": 1}
    pod = local_pod(readinessProbe=probe)
    handler = offline_handler(local, events=KeptEvents(), poll_interval=1.0)
    queued: list[str] = []
    handler.queue_flush = queued.append
    handler.adopt(pod, start_local(local, pod))
    key = f"default/{pod['metadata']['name']}"
    entry = handler.tracked(key)
    assert entry is not None
    handler.prober.start()
    try:
        wait_for(lambda: queued == [key], what="the first verdict (not ready) queued")
        assert entry.probe_verdicts.ready == {"main": False}
        flag.touch()
        wait_for(lambda: entry.probe_verdicts.ready == {"main": True}, what="the readiness probe to pass")
        wait_for(lambda: queued == [key, key], what="the change queued")
    finally:
        assert handler.prober.stop() == []


# -- the pool -------------------------------------------------------------------------------


class BlockingExecutor:
    """An exec that blocks each probe until released, counting how many run at once."""

    name = "blocking"

    def __init__(self, *, blocked: Sequence[str] = ("",)) -> None:
        self.release = threading.Event()
        self.blocked = set(blocked)  # instance ids whose probes block ("" : every one)
        self.running = 0
        self.most = 0
        self.done: dict[str, int] = {}
        self._lock = threading.Lock()

    def exec(
        self, instance_id: InstanceId, command: Sequence[str], *, tty: bool, stdin: bool, container: str = ""
    ) -> Process:
        with self._lock:
            self.running += 1
            self.most = max(self.most, self.running)
        if "" in self.blocked or instance_id in self.blocked:
            self.release.wait(30)
        with self._lock:
            self.running -= 1
            self.done[instance_id] = self.done.get(instance_id, 0) + 1
        return ScriptedProcess(["true"], tty=tty, stdin=stdin)


def tracked_pods(count: int, *, period: int) -> tuple[TrackedMap, list[Tracked]]:
    tracked = TrackedMap()
    probe = {"exec": {"command": ["true"]}, "periodSeconds": period}
    entries = []
    for index in range(count):
        pod = make_pod(f"p{index}", namespace="default", uid=f"u{index}", container={"readinessProbe": probe})
        instance = Instance(InstanceId(f"i{index}"), ClaimName(f"c{index}"), InstanceState.RUNNING,
                            created_at=datetime.now(UTC), started_at=datetime.now(UTC))  # fmt: skip
        entries.append(assess.adopt(tracked, pod, instance, at=time.monotonic(), now=datetime.now(UTC)))
    return tracked, entries


def ignore(entry: Tracked) -> None:
    pass


def test_no_more_probes_run_at_once_than_the_pool_has_workers() -> None:
    executor = BlockingExecutor()
    tracked, _ = tracked_pods(10, period=60)
    prober = Prober(executor, tracked=tracked, events=KeptEvents(), on_change=ignore, workers=3, spread=False)  # type: ignore[arg-type]
    prober.start()
    try:
        # Every due probe is accounted for: three running, seven waiting for a worker.
        wait_for(lambda: executor.running == 3 and prober.backlog() == 7, what="3 running and 7 queued")
        assert executor.most == 3
        executor.release.set()
        wait_for(lambda: sum(executor.done.values()) == 10)
        assert executor.most == 3
    finally:
        executor.release.set()
        assert prober.stop() == []


def test_a_probe_that_hangs_holds_one_worker_and_the_others_keep_their_periods() -> None:
    executor = BlockingExecutor(blocked=("i0",))
    tracked, entries = tracked_pods(3, period=1)
    prober = Prober(executor, tracked=tracked, events=KeptEvents(), on_change=ignore, workers=2)  # type: ignore[arg-type]
    prober.start()
    try:
        wait_for(lambda: executor.done.get("i1", 0) >= 3 and executor.done.get("i2", 0) >= 3)
        assert executor.done.get("i0", 0) == 0 and entries[1].probe_verdicts.ready == {"main": True}
    finally:
        executor.release.set()
        assert prober.stop() == []
