"""Invariants I1-I3 with the real manager process (`manage.py runvnode`) killed and restarted.

The embedded API server runs in the test process; the provider's state outlives the
manager (the fake cloud's HTTP service, or the local provider's state folder), so a
restart is a real one: a new process with an empty memory.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from devcluster import DevCluster
from kube.client import Kube, path_for
from providers.base import InstanceState, Provider
from providers.claim import claim_name
from providers.fake import FakeProvider
from providers.fake.server import FakeCloudServer, start_server
from providers.local import LocalProvider
from providers.owner import Owner
from tests.support.factories import make_pod
from tests.support.pods import get_pod, phase_of
from tests.support.polling import wait_for

ROOT = Path(__file__).resolve().parents[2]
POLL = 0.3
SHUTDOWN_GRACE = 10  # well inside the 30 s `kill` waits, so a slow stop fails with the log


MANAGER_CLUSTER = "nebula-tests"  # the managers' `--cluster-name`: the observers own what they own


class Manager:
    """`manage.py runvnode` as a child process, against the test's cluster and provider."""

    def __init__(
        self, kubeconfig: str, providers_file: Path, alias: str, log: Path, grace: float = SHUTDOWN_GRACE
    ) -> None:
        self.args = [
            sys.executable,
            "manage.py",
            "runvnode",
            "--kubeconfig",
            kubeconfig,
            "--providers-file",
            str(providers_file),
            "--provider",
            alias,
            "--poll-interval",
            str(POLL),
            "--node-ip",
            "127.0.0.1",
            "--kubelet-addr",
            "127.0.0.1:0",
            "--console-addr",
            "127.0.0.1:0",
            "--no-leader-election",
            "--cluster-name",
            MANAGER_CLUSTER,
            "--shutdown-grace",
            str(grace),
        ]
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(self.args, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)

    def kill(self, sig: int = signal.SIGKILL) -> int:
        assert self.process is not None
        self.process.send_signal(sig)
        try:
            code = self.process.wait(30)
        except subprocess.TimeoutExpired:
            print(self.log.read_text()[-20000:])  # pytest shows it with the failure
            raise
        self.process = None
        return code

    def close(self) -> None:
        if self.process is not None:
            self.kill()


@pytest.fixture
def fake_service() -> Iterator[FakeCloudServer]:
    server = start_server()
    yield server
    server.close()


@pytest.fixture(params=["fake", "local"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, dict[str, Any], Provider]]:
    """(alias, settings entry, an observer provider object on the same state)."""
    if request.param == "fake":
        server = start_server()
        options: dict[str, Any] = {"url": server.url}
        observer: Provider = FakeProvider("gpu", options, owner=Owner(MANAGER_CLUSTER, "gpu"))
        yield "gpu", {"backend": "providers.fake.FakeProvider", "options": options}, observer
        server.close()
    else:
        options = {"state_dir": str(tmp_path / "state"), "grace_period": 1}
        observer = LocalProvider("box", options, owner=Owner(MANAGER_CLUSTER, "box"))
        yield "box", {"backend": "providers.local.LocalProvider", "options": options}, observer
        for instance in observer.list():
            observer.terminate(instance.id)


def write_providers_file(tmp_path: Path, alias: str, entry: dict[str, Any]) -> Path:
    path = tmp_path / "providers.yaml"
    path.write_text(yaml.safe_dump({alias: entry}))
    return path


@pytest.fixture(scope="module")
def migrated_mirror() -> None:
    """The console mirror's tables exist before the first kill, so every kill here lands in
    the manager's loops (a kill inside the migration is tests/nebula_site/test_migrate.py's)."""
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput"], cwd=ROOT, check=True, timeout=120)


@pytest.fixture
def start_manager(cluster: DevCluster, tmp_path: Path, migrated_mirror: None) -> Iterator[Callable[..., Manager]]:
    managers: list[Manager] = []

    def start(alias: str, entry: dict[str, Any], grace: float = SHUTDOWN_GRACE) -> Manager:
        assert cluster.kubeconfig_path is not None
        manager = Manager(
            cluster.kubeconfig_path,
            write_providers_file(tmp_path, alias, entry),
            alias,
            tmp_path / "manager.log",
            grace,
        )
        manager.start()
        managers.append(manager)
        return manager

    yield start
    for manager in managers:
        manager.close()


def wait_running(kube: Kube, names: list[str], manager: Manager, timeout: float) -> None:
    """Wait until every named Pod is Running; on failure name the others and show the log."""
    try:
        wait_for(lambda: all(phase_of(kube, n) == "Running" for n in names), timeout=timeout)
    except AssertionError:
        statuses = {n: ((get_pod(kube, n) or {}).get("status") or {}) for n in names}
        others = {n: status for n, status in statuses.items() if status.get("phase") != "Running"}
        events, _ = kube.list(path_for("events", namespace="default"))
        told = [
            f"{e['involvedObject']['name']}: {e['reason']}: {e['message']}"
            for e in events
            if e["involvedObject"]["name"] in others
        ]
        log = manager.log.read_text(errors="replace")[-8000:]
        raise AssertionError(
            f"not Running within {timeout}s: {others}\nEvents: {told}\n--- manager log, last part ---\n{log}"
        ) from None


def claims_of(kube: Kube, names: list[str]) -> set[str]:
    result = set()
    for name in names:
        pod = get_pod(kube, name)
        if pod is not None:
            meta = pod["metadata"]
            result.add(claim_name(meta["namespace"], meta["name"], meta["uid"]))
    return result


def instance_claims(provider: Provider) -> list[str]:
    """The claims of the instances that still exist as compute (the fake shows terminated ones
    a while, as TERMINATED)."""
    return sorted(i.claim for i in provider.list() if i.state is not InstanceState.TERMINATED)


def test_I1_one_instance_per_live_pod_after_sigkills_during_50_concurrent_provisions(
    kube: Kube,
    backend: tuple[str, dict[str, Any], Provider],
    start_manager: Callable[[str, dict[str, Any]], Manager],
) -> None:
    alias, entry, observer = backend
    names = [f"job-{i}" for i in range(50)]
    for name in names:
        kube.create(path_for("pods", namespace="default"), make_pod(name, alias))
    manager = start_manager(alias, entry)
    deleted: list[str] = []
    rng = random.Random(1)
    for round_number in range(3):
        time.sleep(rng.uniform(0.3, 1.5))
        manager.kill(signal.SIGKILL)
        if round_number == 1:  # Pods force-deleted while nobody manages them
            for name in names[:5]:
                kube.delete(path_for("pods", namespace="default", name=name), grace_seconds=0)
                deleted.append(name)
        manager.start()
    live = [n for n in names if n not in deleted]
    wait_running(kube, live, manager, timeout=90)
    expected = sorted(claims_of(kube, live))
    wait_for(lambda: instance_claims(observer) == expected, timeout=30)
    assert len(set(expected)) == 50 - len(deleted)


def test_I2_instance_of_a_pod_force_deleted_while_the_manager_was_down_is_swept(
    kube: Kube,
    backend: tuple[str, dict[str, Any], Provider],
    start_manager: Callable[[str, dict[str, Any]], Manager],
) -> None:
    alias, entry, observer = backend
    manager = start_manager(alias, entry)
    kube.create(path_for("pods", namespace="default"), make_pod("doomed", alias))
    kube.create(path_for("pods", namespace="default"), make_pod("kept", alias))
    wait_running(kube, ["doomed", "kept"], manager, timeout=30)
    assert len(observer.list()) == 2
    manager.kill(signal.SIGKILL)
    kube.delete(path_for("pods", namespace="default", name="doomed"), grace_seconds=0)
    manager.start()
    kept = sorted(claims_of(kube, ["kept"]))
    wait_for(lambda: instance_claims(observer) == kept, timeout=30)
    # The sweep says so in an Event once the terminate returned: the instance can be gone a
    # moment before the Event is written.
    wait_for(lambda: orphan_events(kube), timeout=10, what="an OrphanTerminated Event")
    assert instance_claims(observer) == kept


def orphan_events(kube: Kube) -> list[dict[str, Any]]:
    events, _ = kube.list(path_for("events", namespace="default"))
    return [e for e in events if e["reason"] == "OrphanTerminated"]


def test_I3_provider_unreachable_across_a_restart_changes_nothing(
    kube: Kube,
    fake_service: FakeCloudServer,
    start_manager: Callable[[str, dict[str, Any]], Manager],
) -> None:
    """Running Pods stay Running; nothing is terminated, recreated or failed."""
    entry = {"backend": "providers.fake.FakeProvider", "options": {"url": fake_service.url}}
    observer = FakeProvider("gpu", {"url": fake_service.url}, owner=Owner(MANAGER_CLUSTER, "gpu"))
    manager = start_manager("gpu", entry)
    names = [f"steady-{i}" for i in range(5)]
    for name in names:
        kube.create(path_for("pods", namespace="default"), make_pod(name, "gpu"))
    wait_running(kube, names, manager, timeout=30)
    before = sorted((i.id, i.claim) for i in observer.list())
    fake_service.cloud.outage()
    manager.kill(signal.SIGKILL)
    manager.start()
    time.sleep(12 * POLL + 3)  # many failed polls, startup re-adoption attempts included
    assert all(phase_of(kube, n) == "Running" for n in names)
    calls = {record.method for record in fake_service.cloud.call_log()}
    fake_service.cloud.clear()
    assert sorted((i.id, i.claim) for i in observer.list()) == before
    assert "terminate" not in calls and all(phase_of(kube, n) == "Running" for n in names)
    time.sleep(6 * POLL)
    assert sorted((i.id, i.claim) for i in observer.list()) == before
    assert all(phase_of(kube, n) == "Running" for n in names)


def test_sigterm_stops_the_manager_cleanly_with_exit_code_0(
    backend: tuple[str, dict[str, Any], Provider],
    start_manager: Callable[[str, dict[str, Any]], Manager],
    kube: Kube,
) -> None:
    alias, entry, _ = backend
    manager = start_manager(alias, entry)
    wait_for(lambda: _node_exists(kube, f"nebula-{alias}"), timeout=30)
    assert manager.kill(signal.SIGTERM) == 0


def test_sigterm_while_starting_up_is_an_orderly_stop_with_exit_code_0(
    fake_service: FakeCloudServer, start_manager: Callable[..., Manager], tmp_path: Path
) -> None:
    manager = start_manager("gpu", {"backend": "providers.fake.FakeProvider", "options": {"url": fake_service.url}})
    log = tmp_path / "manager.log"
    wait_for(lambda: log.exists() and "kubelet API on port" in log.read_text(), timeout=30)  # handlers are set by then
    assert manager.kill(signal.SIGTERM) == 0


def test_sigterm_during_a_hung_provider_call_exits_0_within_the_grace_naming_the_busy_thread(
    fake_service: FakeCloudServer,
    start_manager: Callable[..., Manager],
    kube: Kube,
    tmp_path: Path,
) -> None:
    entry = {"backend": "providers.fake.FakeProvider", "options": {"url": fake_service.url, "timeout": 60}}
    manager = start_manager("gpu", entry, grace=1)
    wait_for(lambda: _node_exists(kube, "nebula-gpu"), timeout=30)
    fake_service.cloud.slow(40)  # every provider call now takes 40 s
    time.sleep(3 * POLL + 0.5)  # the poll loop is inside list() now
    started = time.monotonic()
    assert manager.kill(signal.SIGTERM) == 0
    assert time.monotonic() - started < 15
    log = (tmp_path / "manager.log").read_text()
    assert "stopped with work still in flight after 1s" in log
    assert "nebula-gpu poll (" in log


def _node_exists(kube: Kube, name: str) -> bool:
    items, _ = kube.list(path_for("nodes"))
    return any(item["metadata"]["name"] == name for item in items)
