"""Every replica answers: two `manage.py runvnode` processes (leader election on, a short
Lease, TLS consoles, one shared PostgreSQL, one fake cloud over HTTP) against the embedded
API server. The standby's console and API show the leader's Pods (it forwards, pinned to
the certificate the leader publishes on its Lease); a blocklist entry cleared through the
standby is cleared once (one Event); after `kill -9` of the leader the standby serves
within one lease duration (plus its first sync) with the same Pods on the same instances,
none provisioned twice, and the same session and token still log in.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import secrets
import ssl
import subprocess
import sys
from collections.abc import Iterator
from http.cookies import SimpleCookie
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
import yaml

from devcluster import DevCluster
from kube import names
from kube.client import Kube, path_for
from providers.fake.server import FakeCloudServer, start_server
from tests.support.clients.kubectl import KUBECTL_137
from tests.support.factories import make_pod
from tests.support.pods import get_pod, phase_of
from tests.support.polling import wait_for
from tests.support.rigs.process import ManagerProcess
from tests.support.servers.postgres import console_database

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
PROVIDER = "gpu"
LEASE_SECONDS = 4
FIRST_SYNC = 20.0  # seconds a new leader may take to start its Runners and list the cloud
USER, PASSWORD = "operator", secrets.token_urlsafe(12)
PODS = ("two-0", "two-1", "two-2")


class Replica(ManagerProcess):
    """One manager process on its own loopback address, with its own folder (console CA, state)."""

    def __init__(self, name: str, address: str, *, cluster: DevCluster, env: dict[str, str], tmp: Path) -> None:
        self.name, self.address = name, address
        folder = tmp / name
        folder.mkdir()
        args = [
            sys.executable, str(ROOT / "manage.py"), "runvnode", f"--kubeconfig={cluster.kubeconfig_path}",
            f"--providers-file={tmp / 'providers.yaml'}", f"--provider={PROVIDER}", "--poll-interval=0.3",
            f"--node-ip={address}", f"--kubelet-addr={address}:0", f"--console-addr={address}:0", "--console-tls",
            "--cluster-name=two-replicas", f"--lease-duration={LEASE_SECONDS}", "--shutdown-grace=5",
        ]  # fmt: skip
        env = dict(env, NEBULA_STATE_DIR=str(folder / "state"))
        super().__init__(args, cwd=folder, env=env, log=folder / "manager.log")
        self.port = 0

    def start(self) -> None:
        super().start()
        match = wait_for(
            lambda: re.search(
                rf"console https://{re.escape(self.address)}:(\d+)", self.log.read_text(errors="replace")
            ),
            timeout=60,
            what=f"{self.name}'s console listens",
        )
        self.port = int(match.group(1))

    def request(
        self, method: str, path: str, *, headers: dict[str, str] | None = None, body: bytes | None = None
    ) -> tuple[int, http.client.HTTPMessage, bytes]:
        """One request to this replica's console over TLS, its certificate verified by its own CA."""
        context = ssl.create_default_context(cafile=str(self.cwd / ".nebula" / "console-ca.pem"))
        connection = http.client.HTTPSConnection(self.address, self.port, context=context, timeout=30)
        try:
            connection.request(method, path, body=body, headers=headers or {})
            response = connection.getresponse()
            return response.status, response.msg, response.read()
        finally:
            connection.close()

    def role(self) -> str:
        status, _, body = self.request("GET", "/readyz")
        return str(json.loads(body)["role"]) if status == 200 else ""


class Operator:
    """A staff user of the shared database, logged in through `replica`'s admin (session and
    CSRF cookies), with a DRF token too."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.cookies: dict[str, str] = {}

    def log_in(self, replica: Replica) -> None:
        status, headers, page = replica.request("GET", "/admin/login/")
        assert status == 200, page[-500:]
        self._keep(headers)
        form = re.search(rb'name="csrfmiddlewaretoken" value="([^"]+)"', page)
        assert form is not None
        body = urlencode({"username": USER, "password": PASSWORD, "csrfmiddlewaretoken": form.group(1).decode()})
        status, headers, page = replica.request(
            "POST",
            "/admin/login/?next=/admin/",
            headers={**self.session(replica), "Content-Type": "application/x-www-form-urlencoded"},
            body=body.encode(),
        )
        assert status == 302, page[-2000:]
        self._keep(headers)
        assert "sessionid" in self.cookies

    def _keep(self, headers: http.client.HTTPMessage) -> None:
        for line in headers.get_all("Set-Cookie") or []:
            self.cookies.update({key: morsel.value for key, morsel in SimpleCookie(line).items()})

    def session(self, replica: Replica) -> dict[str, str]:
        """Headers a browser on `replica`'s address sends: its cookies, CSRF token and Origin."""
        return {
            "Cookie": "; ".join(f"{k}={v}" for k, v in self.cookies.items()),
            "X-CSRFToken": self.cookies.get("csrftoken", ""),
            "Origin": f"https://{replica.address}:{replica.port}",
        }

    def bearer(self) -> dict[str, str]:
        return {"Authorization": f"Token {self.token}"}


def api(replica: Replica, path: str, headers: dict[str, str]) -> Any:
    status, _, body = replica.request("GET", path, headers=headers)
    assert status == 200, (replica.name, status, body[-300:])
    return json.loads(body)["results"]


def pods_seen(replica: Replica, headers: dict[str, str]) -> set[tuple[str, str, str, str]]:
    """The Pods `replica`'s API lists: (name, uid, instance id, phase)."""
    return {(r["name"], r["uid"], r["instance_id"] or "", r["phase"]) for r in api(replica, "/api/pods", headers)}


def dashboard(replica: Replica, operator: Operator) -> bytes:
    status, _, page = replica.request("GET", "/", headers=operator.session(replica))
    assert status == 200, (replica.name, status)
    return page


def running(seen: set[tuple[str, str, str, str]], wanted: tuple[str, ...]) -> bool:
    return {name for name, _, instance, phase in seen if phase == "Running" and instance} >= set(wanted)


def manage(env: dict[str, str], *args: str) -> str:
    result = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def kubectl_apply(cluster: DevCluster, *manifests: dict[str, Any]) -> None:
    result = subprocess.run(
        [KUBECTL_137, "--kubeconfig", str(cluster.kubeconfig_path), "apply", "-f", "-"],
        input=yaml.safe_dump_all(manifests).encode(), capture_output=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr


def instance_ids(kube: Kube) -> dict[str, str]:
    """The instance each of PODS runs on, as the Pod's annotation says."""
    pods = {name: get_pod(kube, name) or {} for name in PODS}
    return {name: pod["metadata"]["annotations"][names.INSTANCE_ID_ANNOTATION] for name, pod in pods.items()}


def block_events(kube: Kube) -> list[dict[str, Any]]:
    events = kube.get(path_for("events", namespace="default"))["items"]
    return [e for e in events if e.get("reason") == names.EVENT_BLOCK_CLEARED]


@pytest.fixture
def fake_cloud() -> Iterator[FakeCloudServer]:
    server = start_server()
    yield server
    server.close()


@pytest.fixture
def replicas(cluster: DevCluster, fake_cloud: FakeCloudServer, tmp_path: Path) -> Iterator[tuple[Replica, Replica]]:
    """Two managers on one PostgreSQL; the first leads, the second stands by."""
    with console_database() as database_url:
        (tmp_path / "providers.yaml").write_text(
            yaml.safe_dump({PROVIDER: {"backend": "providers.fake.FakeProvider", "options": {"url": fake_cloud.url}}})
        )
        env = dict(
            os.environ,
            DATABASE_URL=database_url,
            DJANGO_SECRET_KEY=secrets.token_urlsafe(50),  # one Secret for the Deployment: sessions hold on both
            DJANGO_ALLOWED_HOSTS="127.0.0.2,127.0.0.3",
        )
        manage(env, "migrate", "--no-input")  # the init container's step, once
        first = Replica("first", "127.0.0.2", cluster=cluster, env=env, tmp=tmp_path)
        second = Replica("second", "127.0.0.3", cluster=cluster, env=env, tmp=tmp_path)
        try:
            first.start()
            wait_for(first.role, timeout=60, what="the first replica is ready")
            assert first.role() == "leader"
            second.start()
            wait_for(lambda: second.role() == "standby", timeout=60, what="the second replica stands by")
            yield first, second
        finally:
            second.close()
            first.close()


def test_either_replica_answers_with_the_leaders_memory_and_the_standby_takes_over_after_kill_9(
    cluster: DevCluster, kube: Kube, fake_cloud: FakeCloudServer, replicas: tuple[Replica, Replica]
) -> None:
    leader, standby = replicas
    token = manage(
        leader.env,
        "shell",
        "-c",
        "from django.contrib.auth.models import User; from rest_framework.authtoken.models import Token; "
        f"u = User.objects.create_user({USER!r}, password={PASSWORD!r}, is_staff=True); "
        "print(Token.objects.create(user=u).key)",
    ).split()[-1]  # fmt: skip  (the shell's own notes come first)
    operator = Operator(token)
    operator.log_in(standby)  # the admin's login form, through the standby: session and CSRF cookies

    # The same Pods through either address, within 2 s of the leader's API showing them.
    kubectl_apply(cluster, *(make_pod(name, PROVIDER) for name in PODS))
    truth = wait_for(
        lambda: (seen := pods_seen(leader, operator.bearer())) and running(seen, PODS) and seen,
        timeout=60,
        what="the leader's API shows the Pods Running",
    )

    def everywhere() -> bool:
        """Both addresses' API (token and session) and dashboard (the mirror) show them."""
        for replica in (leader, standby):
            for headers in (operator.bearer(), operator.session(replica)):
                if pods_seen(replica, headers) != truth:
                    return False
            if b'data-phase="Running">Running <strong>3</strong>' not in dashboard(replica, operator):
                return False
        return True

    wait_for(everywhere, timeout=2.0, what="both replicas show the leader's Pods")

    # An operator action through the standby takes effect once.
    fake_cloud.cloud.refuse("capacity", count=1)
    kubectl_apply(cluster, make_pod("refused", PROVIDER))
    wait_for(lambda: phase_of(kube, "refused") == "Failed", timeout=60, what="the refused Pod fails")
    (entry,) = wait_for(lambda: api(leader, "/api/blocklist", operator.bearer()), what="a blocklist entry")
    same = {key: value for key, value in entry.items() if key != "seconds_left"}  # (it counts down)
    assert [
        {k: v for k, v in e.items() if k != "seconds_left"} for e in api(standby, "/api/blocklist", operator.bearer())
    ] == [same]
    path = f"/api/blocklist/{entry['id']}"
    assert standby.request("DELETE", path, headers=operator.session(standby))[0] == 204
    status, _, body = standby.request("DELETE", path, headers=operator.bearer())
    assert status == 404, body
    assert api(leader, "/api/blocklist", operator.bearer()) == []
    cleared = wait_for(lambda: block_events(kube), what="the BlocklistEntryCleared Event")
    assert len(cleared) == 1 and cleared[0].get("count", 1) == 1
    assert f"cleared by {USER}" in cleared[0]["message"]
    assert leader.log.read_text().count(f"blocklist entry {entry['id']}") == 1

    # kill -9: the Lease stays held until it expires; meanwhile the standby says why it cannot answer.
    instances = {record["id"] for record in fake_cloud.cloud.instances()}
    on_pods = instance_ids(kube)
    leader.kill()
    status, headers, body = standby.request("GET", "/api/pods", headers=operator.bearer())
    assert status == 503 and headers["Retry-After"] and b"does not answer" in body, body
    after = wait_for(
        lambda: (seen := pods_seen(standby, operator.bearer())) and running(seen, PODS) and seen,
        timeout=LEASE_SECONDS + FIRST_SYNC,
        what="the standby serves the Pods as the new leader",
        ignoring=(AssertionError,),  # 503 until it leads
    )
    assert {(n, u, i, p) for n, u, i, p in after if n in PODS} == {(n, u, i, p) for n, u, i, p in truth if n in PODS}
    assert standby.role() == "leader"
    assert {name: phase_of(kube, name) for name in PODS} == dict.fromkeys(PODS, "Running")
    assert instance_ids(kube) == on_pods
    assert {record["id"] for record in fake_cloud.cloud.instances()} == instances  # none provisioned twice
    assert pods_seen(standby, operator.session(standby)) == after  # the session outlived its leader
