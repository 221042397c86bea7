"""What `make run` does, end to end: runvnode with the embedded cluster, the local
provider and the demo Pod `hello`, driven from a fresh working folder, and the dev login it
prints."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kube.client import Kube, KubeError, load_api_client, path_for
from nebula_site import demo as demo_module
from tests.support.clients.consolelogin import LOGIN_LINE, log_in
from tests.support.clients.kubectl import KUBECTL_IMAGE
from tests.support.devrun import DEV_RUN, dev_run
from tests.support.polling import wait_for

ROOT = Path(__file__).resolve().parents[2]
STARTING = (KubeError, OSError, ValueError)  # what a manager still starting answers


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path, float]]:
    started = time.monotonic()
    with dev_run(tmp_path, [*DEV_RUN, "--demo"]) as process:
        yield process, tmp_path, started


def test_make_run_prints_one_console_login_that_works(
    demo: tuple[subprocess.Popen[bytes], Path, float],
) -> None:
    process, folder, _ = demo
    line = wait_for(lambda: LOGIN_LINE.search((folder / "run.log").read_text()), 90, 0.1, what="the login line")
    console, user, password = line.groups()
    assert log_in(console, user, password)[1].endswith("/admin/")  # logged in: the admin's index
    assert log_in(console, user, password + "x")[1].endswith("/admin/login/")  # a wrong one is refused
    process.send_signal(signal.SIGTERM)
    assert process.wait(60) == 0
    assert (folder / "run.log").read_text().count("log in as") == 1


def test_make_run_shows_hello_running_with_annotations_a_ready_node_and_a_renewing_lease(
    demo: tuple[subprocess.Popen[bytes], Path, float],
) -> None:
    process, folder, started = demo
    kubeconfig = folder / ".nebula" / "kubeconfig"
    wait_for(lambda: kubeconfig.exists() and kubeconfig.stat().st_size > 0, 60, 0.1, ignoring=STARTING)
    kube = Kube(load_api_client(str(kubeconfig)))
    pod = wait_for(
        lambda: (p := kube.get(path_for("pods", namespace="default", name="hello")))["status"].get("phase") == "Running"
        and p,
        60,
        0.1,
        ignoring=STARTING,
    )
    print(f"hello Running {time.monotonic() - started:.1f}s after the process started")
    assert pod["spec"]["nodeName"] == "nebula-local"
    assert pod["metadata"]["annotations"]["nebula.io/instance-id"].startswith("local-")
    assert pod["metadata"]["annotations"]["nebula.io/endpoint"] == "127.0.0.1"
    node = kube.get(path_for("nodes", name="nebula-local"))
    assert {c["type"]: c["status"] for c in node["status"]["conditions"]}["Ready"] == "True"
    lease_path = path_for("leases", namespace="kube-node-lease", name="nebula-local", group="coordination.k8s.io")
    first = wait_for(lambda: kube.get(lease_path)["spec"]["renewTime"], 30, 0.1, ignoring=STARTING)
    wait_for(lambda: kube.get(lease_path)["spec"]["renewTime"] != first, 30, 0.1, ignoring=STARTING)
    assert b"kubectl --kubeconfig" in (folder / "run.log").read_bytes()

    # What `kubectl describe pod hello` shows a user: the kubelet's lifecycle Events.
    def described() -> str | None:
        shown = subprocess.run(
            [KUBECTL_IMAGE, "--kubeconfig", str(kubeconfig), "describe", "pod", "hello"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        text = shown.stdout
        return text if all(reason in text for reason in ("Provisioning", "Provisioned", "Started")) else None

    events = wait_for(described, 30, 0.5, what="describe pod hello lists Provisioning, Provisioned, Started")
    assert "provisioning an instance on local" in events and "Started container main" in events
    process.send_signal(signal.SIGTERM)
    assert process.wait(60) == 0


@pytest.mark.django_db
def test_each_start_resets_the_dev_login_to_a_new_random_password() -> None:
    from django.contrib.auth import authenticate

    user, first = demo_module.reset_dev_login()
    again, second = demo_module.reset_dev_login()
    assert user == again == "dev" and first != second and len(second) >= 20
    assert authenticate(username=user, password=first) is None
    signed_in = authenticate(username=user, password=second)
    assert signed_in is not None and signed_in.is_superuser
