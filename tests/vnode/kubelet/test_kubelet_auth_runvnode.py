"""`runvnode --dev-cluster` with its default kubelet auth: anonymous requests to the kubelet
port are refused (401), while real kubectl logs and exec work through the embedded cluster,
which presents its kubelet client certificate (the listener's client CA is wired to it);
and the flags over the NEBULA settings, which `manage.py check` validates (nebula.E016)."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kube.client import Kube, KubeError, load_api_client, path_for
from nebula_site import kubeletflags
from tests.support.clients.kubectl import KUBECTL_120, KUBECTL_137, KUBECTL_IMAGE
from tests.support.devrun import DEV_RUN, dev_run
from tests.support.polling import wait_for
from tests.support.servers.tls import https_get
from vnode.kubelet import auth

ROOT = Path(__file__).resolve().parents[3]
STARTING = (KubeError, OSError, ValueError)


@pytest.fixture
def manager(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    with dev_run(tmp_path, [*DEV_RUN, "--demo"]) as process:
        yield process, tmp_path


def kubectl(binary: str, kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([binary, "--kubeconfig", str(kubeconfig), *args], capture_output=True, text=True, timeout=60)


def test_runvnode_refuses_anonymous_kubelet_requests_and_kubectl_gets_through_the_devcluster(
    manager: tuple[subprocess.Popen[bytes], Path],
) -> None:
    process, folder = manager
    kubeconfig = folder / ".nebula" / "kubeconfig"
    wait_for(lambda: kubeconfig.exists() and kubeconfig.stat().st_size > 0, 60, 0.1, ignoring=STARTING)
    kube = Kube(load_api_client(str(kubeconfig)))
    wait_for(
        lambda: kube.get(path_for("pods", namespace="default", name="hello"))["status"].get("phase") == "Running",
        90, 0.1, ignoring=STARTING,
    )  # fmt: skip
    port = kube.get(path_for("nodes", name="nebula-local"))["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"]
    assert https_get(port, "/containerLogs/default/hello/main")[0:3:2] == (401, b"Unauthorized")
    for binary in (KUBECTL_120, KUBECTL_IMAGE, KUBECTL_137):

        def logged(binary: str = binary) -> str | None:
            answer = kubectl(binary, kubeconfig, "logs", "hello")
            return answer.stdout if answer.returncode == 0 and "hello 1" in answer.stdout else None

        wait_for(logged, 30, 0.5, what=f"{binary} logs hello")
        shell = kubectl(binary, kubeconfig, "exec", "hello", "--", "echo", "through-the-client-cert")
        assert shell.returncode == 0 and shell.stdout == "through-the-client-cert\n", shell.stderr
    text = (folder / "run.log").read_text()
    assert "accepts any client" not in text
    assert (folder / kubeletflags.DEV_KUBELET_CLIENT_CA).read_bytes().startswith(b"-----BEGIN CERTIFICATE-----")
    process.send_signal(signal.SIGTERM)
    assert process.wait(60) == 0


def test_the_flags_win_over_the_settings_and_the_default_refuses_anonymous() -> None:
    default = kubeletflags.auth_options({})
    assert (default.anonymous, default.token_auth, default.authorization) == (False, True, auth.WEBHOOK)
    given = kubeletflags.auth_options(
        {"kubelet_anonymous_auth": True, "kubelet_token_auth": False, "kubelet_authorization_mode": "AlwaysAllow"}
    )
    assert (given.anonymous, given.token_auth, given.authorization) == (True, False, auth.ALWAYS_ALLOW)
    assert given.build().open  # no API server client needed for it


def test_a_bad_kubelet_auth_setting_is_nebula_E016(settings: Any) -> None:
    from nebula_site.checks import check_nebula_settings

    settings.NEBULA = {**settings.NEBULA, "KUBELET_AUTHORIZATION_MODE": "RBAC", "KUBELET_ANONYMOUS_AUTH": "yes"}
    found = [(e.id, e.msg) for e in check_nebula_settings() if e.id == "nebula.E016"]
    assert [m for _, m in found] == [
        "NEBULA['KUBELET_AUTHORIZATION_MODE']='RBAC': Webhook or AlwaysAllow",
        "NEBULA['KUBELET_ANONYMOUS_AUTH']='yes' must be true or false",
    ]
