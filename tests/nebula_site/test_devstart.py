"""`make run`'s first contact, driving its own command line (`runvnode --dev-cluster --provider
local --demo`) with real kubectl: the base install's webhook and console roles are there, so
docs/deploy.md step 8 places its Pod and docs/console.md's token works; the demo Pod meets a
Ready node; no secret-key warning; and Ctrl-C (SIGINT) ends every process a Pod started."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from devcluster import DevCluster
from kube import names
from kube.client import Kube, KubeError, load_api_client, path_for
from nebula_site import demo
from nebula_site.management.commands import runvnode
from nebula_site.manager import devteardown
from providers.base import ClaimName, InstanceState, ProvisionRequest
from providers.fake import FakeProvider
from providers.local import LocalProvider
from providers.owner import Owner
from tests.support.clients.kubectl import KUBECTL_137
from tests.support.deploy.steps import doc_block
from tests.support.devrun import DEV_RUN, dev_run
from tests.support.factories import make_pod_spec
from tests.support.polling import wait_for

ROOT = Path(__file__).resolve().parents[2]
STARTING = (KubeError, OSError, ValueError)  # what a manager still starting answers
CONSOLE = re.compile(r"console (http://127\.0\.0\.1:\d+)")


@dataclass
class Run:
    process: subprocess.Popen[bytes]
    folder: Path
    log: Path

    @property
    def kubeconfig(self) -> Path:
        return self.folder / ".nebula" / "kubeconfig"

    def kube(self) -> Kube:
        wait_for(lambda: self.kubeconfig.exists() and self.kubeconfig.stat().st_size > 0, 90, 0.1, what="kubeconfig")
        return Kube(load_api_client(str(self.kubeconfig)))

    def kubectl(self, *args: str, check: bool = True) -> str:
        argv = [KUBECTL_137, "--kubeconfig", str(self.kubeconfig), *args]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=90)
        assert done.returncode == 0 or not check, done.stdout + done.stderr
        return done.stdout

    def text(self) -> str:
        return self.log.read_text()


def clean_env(folder: Path) -> dict[str, str]:
    """A developer's environment: no Django or Nebula settings (so the dev secret key), no kubeconfig."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DJANGO_", "NEBULA_", "KUBERNETES_")) and k != "KUBECONFIG"
    }
    return {**env, "HOME": str(folder), "NEBULA_DB_PATH": str(folder / "console.sqlite3")}


@pytest.fixture
def make_run(tmp_path: Path) -> Iterator[Run]:
    """`make run`'s command line on free ports, in a fresh folder; killed and swept after."""
    with dev_run(tmp_path, [*DEV_RUN, "--demo"], env=clean_env(tmp_path)) as process:
        yield Run(process, tmp_path, tmp_path / "run.log")


def phase(kube: Kube, name: str) -> str | None:
    return (kube.get(path_for("pods", namespace="default", name=name)).get("status") or {}).get("phase")


def reasons(kube: Kube, name: str) -> list[str]:
    items, _ = kube.list(path_for("events", namespace="default"))
    return [str(e.get("reason")) for e in items if (e.get("involvedObject") or {}).get("name") == name]


def test_the_demo_pod_is_created_once_its_node_is_ready_and_the_dev_key_is_not_a_warning(make_run: Run) -> None:
    kube = make_run.kube()
    wait_for(lambda: phase(kube, demo.DEMO_POD) == "Running", 90, 0.1, ignoring=STARTING, what="hello Running")
    described = make_run.kubectl("describe", "pod", demo.DEMO_POD)
    assert "Scheduled" in described and "FailedScheduling" not in described
    assert "FailedScheduling" not in reasons(kube, demo.DEMO_POD)
    text = make_run.text()
    assert "Nebula is running" in text
    assert "DJANGO_SECRET_KEY" not in text and "WARNING" not in text, text


def test_make_run_places_the_documented_opted_in_pod(make_run: Run) -> None:
    """docs/deploy.md step 8 as written, beside the demo Pod."""
    kube = make_run.kube()
    wait_for(lambda: "Nebula is running" in make_run.text(), 90, 0.1, what="the banner")
    step = doc_block("From an empty cluster to `kubectl logs` (kind)", 8)
    prelude = f'kubectl() {{ {shlex.quote(KUBECTL_137)} --kubeconfig {shlex.quote(str(make_run.kubeconfig))} "$@"; }}\n'
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", prelude + step], capture_output=True, text=True, timeout=90
    )
    assert done.returncode == 0, done.stdout + done.stderr
    pod = kube.get(path_for("pods", namespace="default", name="trial"))
    assert pod["status"]["phase"] == "Running" and pod["spec"]["nodeName"] == names.node_name("local")
    assert not pod["spec"].get("schedulingGates")  # gated by the webhook, released by placement
    assert "Placed" in wait_for(lambda: reasons(kube, "trial"), 30, 0.1, what="events")


def console_api(console: str, token: str) -> int:
    request = urllib.request.Request(
        f"{console}/api/pods/", headers={"Authorization": f"Bearer {token}", "Accept": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            json.loads(answer.read())
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def test_make_run_lets_a_console_role_token_log_in(make_run: Run) -> None:
    """docs/console.md's recipe: a ServiceAccount bound to `nebula-console-operator`, its token."""
    make_run.kube()
    line = wait_for(lambda: CONSOLE.search(make_run.text()), 90, 0.1, what="the console's address")
    wait_for(lambda: "Nebula is running" in make_run.text(), 90, 0.1, what="the banner")
    make_run.kubectl("create", "namespace", "team")
    make_run.kubectl("create", "serviceaccount", "ops-bot", "-n", "team")
    token = make_run.kubectl("create", "token", "ops-bot", "-n", "team").strip()
    assert console_api(line.group(1), token) == 403  # no role bound yet
    make_run.kubectl(
        "create", "clusterrolebinding", "ops-bot",
        "--clusterrole=nebula-console-operator", "--serviceaccount=team:ops-bot",
    )  # fmt: skip
    wait_for(lambda: console_api(line.group(1), token) == 200, 30, 0.2, what="the bound token reads /api/pods/")


MARKER = "NEBULA_TEST_MARKER"
SERVER = "import socket, time; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(); time.sleep(3600)"


def marked(value: str) -> list[int]:
    """The processes whose environment holds MARKER=value (a /proc scan)."""
    needle = f"{MARKER}={value}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if needle in (entry / "environ").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
            except OSError:
                continue  # gone, or not ours to read
    return found


def pod(name: str, command: list[str], marker: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {names.PROVIDER_KEY: "local"},
            "tolerations": [{"key": names.PROVIDER_KEY, "operator": "Exists"}],
            "containers": [
                {"name": "main", "image": "busybox", "command": command, "env": [{"name": MARKER, "value": marker}]}
            ],
        },
    }


def test_ctrl_c_terminates_every_process_a_pod_started(make_run: Run) -> None:
    kube = make_run.kube()
    marker = uuid.uuid4().hex
    pods = path_for("pods", namespace="default")
    server = pod("server", [sys.executable, "-c", SERVER], marker)
    wait_for(lambda: kube.create(pods, server), 60, 0.1, ignoring=STARTING)
    kube.create(pods, pod("sleeper", ["sh", "-c", "sleep 3600 & wait"], marker))
    for name in ("server", "sleeper", demo.DEMO_POD):
        wait_for(lambda n=name: phase(kube, n) == "Running", 90, 0.1, ignoring=STARTING, what=f"{name} Running")
    assert len(wait_for(lambda: len(marked(marker)) >= 3 and marked(marker), 30, 0.1, what="the Pods' processes")) >= 3
    make_run.process.send_signal(signal.SIGINT)
    assert make_run.process.wait(60) == 0
    assert marked(marker) == []
    said = [line for line in make_run.text().splitlines() if line.startswith("terminated ")]
    assert len(said) == 1 and said[0].startswith("terminated 3 instances"), said  # hello, server, sleeper


def test_terminate_instances_waits_until_each_is_gone() -> None:
    provider = FakeProvider("fake", {"cloud": f"teardown-{uuid.uuid4().hex[:8]}"})
    lines: list[str] = []
    assert devteardown.terminate_instances({"fake": provider}, 5.0, say=lines.append) == 0
    assert lines == []  # nothing to terminate: nothing said
    for claim in ("a", "b"):
        provider.provision(make_pod_spec(), ProvisionRequest(claim=ClaimName(claim)))
    assert len(provider.list()) == 2
    assert devteardown.terminate_instances({"fake": provider}, 5.0, say=lines.append) == 0
    assert [i for i in provider.list() if i.state is not InstanceState.TERMINATED] == []
    assert len(lines) == 1 and lines[0].startswith("terminated 2 instances of the embedded cluster's Pods")


def test_readme_shows_what_make_run_prints_and_keeps_two_set_up_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    banner = demo.instructions(runvnode.DEV_KUBECONFIG).strip("\n")
    assert f"```text\n{banner}\n```" in readme
    top = re.search(r"```sh\n(.*?)```", readme, re.S)
    assert top is not None
    assert [line.split()[:2] for line in top.group(1).splitlines()] == [["make", "run"], ["make", "test"]]


def test_against_a_real_cluster_a_stop_leaves_the_instances_running(cluster: DevCluster, tmp_path: Path) -> None:
    """Only the embedded cluster's instances are terminated: elsewhere the next manager adopts them."""
    log = tmp_path / "run.log"
    argv = [sys.executable, str(ROOT / "manage.py"), "runvnode", "--kubeconfig", str(cluster.kubeconfig_path)]
    argv += ["--provider", "local", "--console-addr", "127.0.0.1:0", "--metrics-addr", "", "--kubelet-addr"]
    argv += ["127.0.0.1:0", "--node-ip", "127.0.0.1"]
    marker = uuid.uuid4().hex
    with log.open("wb") as out:
        process = subprocess.Popen(argv, cwd=tmp_path, env=clean_env(tmp_path), stdout=out, stderr=subprocess.STDOUT)
    try:
        kube = Kube(load_api_client(str(cluster.kubeconfig_path)))
        kube.create(path_for("pods", namespace="default"), pod("kept", ["sh", "-c", "sleep 3600 & wait"], marker))
        wait_for(lambda: phase(kube, "kept") == "Running", 90, 0.1, ignoring=STARTING, what="kept Running")
        running = wait_for(lambda: len(marked(marker)) >= 2 and marked(marker), 30, 0.1, what="the Pod's processes")
        process.send_signal(signal.SIGINT)
        assert process.wait(60) == 0
        assert set(running) <= set(marked(marker))
        assert "terminated " not in log.read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(30)
        identity = str(cluster.store.get("/namespaces", "", "kube-system")["metadata"]["uid"])  # the owner
        options = {"state_dir": str(tmp_path / ".nebula" / "state"), "grace_period": 0}
        observer = LocalProvider("local", options, owner=Owner(identity, "local"))
        for instance in observer.list():
            observer.terminate(instance.id)
        wait_for(lambda: marked(marker) == [], 30, 0.1, what="the kept Pod's processes ended by the sweep")


def test_the_dev_webhook_listener_serves_a_bounded_number_of_connections() -> None:
    """Past MAX_CONNECTIONS held connections (each a thread) one more is closed unserved; once
    they go, the webhook path is served again over TLS with the listener's CA."""
    import socket
    import ssl

    from nebula_site.manager import devinstall

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"served\n"]

    listener = devinstall.WebhookListener(app)
    listener.start()
    port = int(listener.url.rsplit(":", 1)[1])
    held = [socket.create_connection((devinstall.WEBHOOK_HOST, port)) for _ in range(devinstall.MAX_CONNECTIONS)]
    try:
        with socket.create_connection((devinstall.WEBHOOK_HOST, port)) as extra:
            extra.settimeout(devinstall.HANDSHAKE_TIMEOUT / 2)  # closed at once, not at a timeout
            assert extra.recv(1) == b""
        for sock in held:  # each still waits in its handshake, served
            sock.settimeout(0.01)
            with pytest.raises(TimeoutError):
                sock.recv(1)
    finally:
        for sock in held:
            sock.close()
    context = ssl.create_default_context(cadata=listener.ca_pem.decode())

    def served() -> bytes | None:
        try:
            with urllib.request.urlopen(listener.url + names.WEBHOOK_PATH, context=context, timeout=5) as answer:
                return bytes(answer.read())
        except (urllib.error.URLError, ConnectionError):  # slots not yet given back
            return None

    try:
        assert wait_for(served, 30, 0.1, what="the webhook served again") == b"served\n"
    finally:
        listener.stop()
