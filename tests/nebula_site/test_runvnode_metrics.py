"""`manage.py runvnode`'s metrics listener in real processes on the embedded cluster: the
leader and a standby each serve /metrics (nebula_leader 1 and 0, each its own process
metrics), the standby's turns 1 once the leader stops; `--metrics-auth=token` lets in only a
ServiceAccount token RBAC allows `get` on /metrics (TokenReview and SubjectAccessReview by the
API server: 401 without or with a bad token, 403 without the grant); `promtool check metrics`
finds no problem in either scrape. Bad metrics flags stop runvnode before anything starts; a
port in use stops it when the address was given (flag or setting)."""

from __future__ import annotations

import errno
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from prometheus_client.parser import text_string_to_metric_families

from devcluster import DevCluster
from kube.client import Kube, path_for
from tests.support.clients.scrape import check_metrics, get
from tests.support.fixtures import kube_for
from tests.support.kubeconfigs import unserved_kubeconfig
from tests.support.polling import wait_for

ROOT = Path(__file__).resolve().parents[2]
LISTENING = re.compile(rb"metrics (https?)://127\.0\.0\.1:(\d+)/metrics")
RBAC = "/apis/rbac.authorization.k8s.io/v1"

Manager = Callable[..., tuple[subprocess.Popen[bytes], str]]


@pytest.fixture
def manager(tmp_path: Path, cluster: DevCluster) -> Iterator[Manager]:
    """`start(name, *flags)`: a runvnode process on `cluster` (provider fake, every listener on
    a free loopback port) in its own folder; returns it and its metrics URL once it listens."""
    started: list[subprocess.Popen[bytes]] = []

    def start(name: str, *flags: str) -> tuple[subprocess.Popen[bytes], str]:
        folder = tmp_path / name
        folder.mkdir()
        log = folder / "run.log"
        command = [sys.executable, str(ROOT / "manage.py"), "runvnode", "--kubeconfig", str(cluster.kubeconfig_path)]
        command += ["--provider", "fake", "--namespace", "default", "--cluster-name", "metrics-test"]
        command += ["--kubelet-addr", "127.0.0.1:0", "--console-addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0"]
        with log.open("wb") as out:
            process = subprocess.Popen([*command, *flags], cwd=folder, stdout=out, stderr=subprocess.STDOUT)
        started.append(process)

        def listening() -> str | None:
            assert process.poll() is None, log.read_text()
            found = LISTENING.search(log.read_bytes())
            return f"{found[1].decode()}://127.0.0.1:{found[2].decode()}/metrics" if found else None

        return process, wait_for(listening, 60, 0.1, what=f"{name}'s metrics listener")

    yield start
    for process in started:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in started:
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def gauge(url: str, name: str, token: str | None = None) -> float | None:
    status, body = get(url, token=token)
    if status != 200:
        return None
    values = [s.value for f in text_string_to_metric_families(body) for s in f.samples if s.name == name]
    return values[0] if values else None


def service_account_token(kube: Kube, namespace: str, name: str) -> str:
    kube.create(path_for("serviceaccounts", namespace=namespace), {"metadata": {"name": name}})
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}}
    answer = kube.create(f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token", body)
    return str(answer["status"]["token"])


def grant_metrics_reader(kube: Kube, namespace: str, name: str) -> None:
    """What kube-prometheus gives its Prometheus: `get` on the non-resource URL /metrics."""
    role = {"metadata": {"name": "metrics-reader"}, "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]}
    kube.create(f"{RBAC}/clusterroles", role)
    binding = {
        "metadata": {"name": "metrics-reader"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "metrics-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
    }
    kube.create(f"{RBAC}/clusterrolebindings", binding)


def test_leader_and_standby_serve_metrics_and_token_auth_follows_rbac(cluster: DevCluster, manager: Manager) -> None:
    kube = kube_for(cluster)
    kube.create(path_for("namespaces"), {"metadata": {"name": "monitoring"}})
    prometheus = service_account_token(kube, "monitoring", "prometheus")
    stranger = service_account_token(kube, "monitoring", "stranger")
    grant_metrics_reader(kube, "monitoring", "prometheus")

    leader, leader_url = manager("leader", "--metrics-auth", "token")
    assert leader_url.startswith("http://")
    wait_for(lambda: gauge(leader_url, "nebula_leader", prometheus) == 1.0, 60, 0.2, what="the leader's gauge")
    assert get(leader_url)[0] == 401
    assert get(leader_url, token="not-a-token")[0] == 401
    assert get(leader_url, token=stranger) == (
        403,
        "system:serviceaccount:monitoring:stranger may not get /metrics\n",
    )
    # nebula_leader turns 1 with the Lease; the node's gauge once its Runner has started.
    up = 'nebula_provider_up{node="nebula-fake",provider="fake"}'
    leader_scrape = wait_for(
        lambda: (answer := get(leader_url, token=prometheus))[0] == 200 and up in answer[1] and answer[1],
        60,
        0.2,
        what="the leader's node gauge",
    )

    _, standby_url = manager("standby")  # plain HTTP, no auth: the default
    standby_scrape = wait_for(
        lambda: (answer := get(standby_url))[0] == 200 and "process_cpu_seconds_total" in answer[1] and answer[1],
        30,
        0.2,
        what="the standby's scrape",
    )
    assert gauge(standby_url, "nebula_leader") == 0.0
    assert "nebula_provider_up{" not in standby_scrape  # no virtual node runs on a standby
    for scrape in (leader_scrape, standby_scrape):
        checked = check_metrics(scrape)
        assert checked.returncode == 0 and not (checked.stdout + checked.stderr).strip(), checked.stdout

    leader.send_signal(signal.SIGTERM)  # releases the Lease on the way out
    assert leader.wait(60) == 0
    wait_for(lambda: gauge(standby_url, "nebula_leader") == 1.0, 60, 0.2, what="the standby taking over")


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--metrics-addr", "127.0.0.1:99999"], "--metrics-addr: .*port must be a number"),
        (["--metrics-addr", "metrics.example:9090"], "--metrics-addr: .*is not an IP address"),
        (["--metrics-cert", "/tmp/tls.crt"], "--metrics-cert and --metrics-key go together"),
    ],
)
def test_bad_metrics_flags_are_command_errors(flags: list[str], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        call_command("runvnode", *flags, "--provider", "fake")


def test_an_unknown_metrics_auth_is_refused_by_the_parser() -> None:
    with pytest.raises(CommandError, match="invalid choice"):
        call_command("runvnode", "--metrics-auth", "basic", "--provider", "fake")


@pytest.mark.parametrize("how", ["flag", "setting"])
def test_a_metrics_port_in_use_given_explicitly_stops_runvnode(tmp_path: Path, how: str) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        command = [sys.executable, str(ROOT / "manage.py"), "runvnode", "--provider", "fake", "--no-leader-election"]
        command += ["--kubelet-addr", "127.0.0.1:0", "--console-addr", "127.0.0.1:0"]
        command += ["--kubeconfig", unserved_kubeconfig(tmp_path)]
        env = dict(os.environ)
        if how == "flag":
            command += ["--metrics-addr", address]
        else:
            env["NEBULA_METRICS_ADDR"] = address
        done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert f"cannot start the metrics listener: [Errno {errno.EADDRINUSE}]" in done.stderr, done.stderr
