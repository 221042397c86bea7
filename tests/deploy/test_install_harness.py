"""The rendered-install harness does what the kubelet and Docker do with a Pod spec and an
image (tests/support/deploy/kubelet.py, tests/support/deploy/image.py), so tests/deploy/
test_rendered_install.py runs what a cluster would run, not an approximation of it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.deploy.image import ImageConfig, image_config
from tests.support.deploy.kubelet import PodFacts, container_argv, container_env
from tests.support.deploy.manifests import ROOT

IMAGE = ImageConfig(entrypoint=("python", "manage.py", "runvnode"), cmd=("--help",), workdir="/app", user="1",
                    env={"PATH": "/opt/venv/bin:/bin", "A": "image"})  # fmt: skip


def facts(tmp_path: Path) -> PodFacts:
    return PodFacts(
        name="p-0", namespace="ns", pod_ip="10.0.0.9", secrets={"s": {"k": b"secret"}},
        config_maps={"c": {"A": "configmap", "B": "b"}}, service_env={"KUBERNETES_SERVICE_HOST": "10.96.0.1"},
        service_account={}, volumes_root=tmp_path,
    )  # fmt: skip


def test_the_dockerfile_gives_the_entry_point_workdir_and_env_the_deployment_relies_on() -> None:
    config = image_config(ROOT / "Dockerfile")
    assert config.entrypoint == ("python", "manage.py", "runvnode") and config.cmd == ()
    assert config.workdir == "/app" and config.user == "10001:10001"
    assert config.env["PATH"].startswith("/opt/venv/bin:/usr/local/sbin:")
    assert config.env["PYTHONDONTWRITEBYTECODE"] == "1"


@pytest.mark.parametrize(
    ("container", "argv"),
    [
        ({}, ["python", "manage.py", "runvnode", "--help"]),
        ({"args": ["--x"]}, ["python", "manage.py", "runvnode", "--x"]),
        ({"args": []}, ["python", "manage.py", "runvnode"]),
        ({"command": ["python", "manage.py", "migrate"]}, ["python", "manage.py", "migrate"]),
        ({"command": ["sh"], "args": ["-c", "$(B) $$(B) $(NONE)"]}, ["sh", "-c", "b $(B) $(NONE)"]),
    ],
)
def test_command_replaces_the_entry_point_and_args_the_cmd(container: dict[str, object], argv: list[str]) -> None:
    assert container_argv({"name": "c", **container}, IMAGE, {"B": "b"}) == argv


def test_env_is_image_then_service_then_env_from_then_env(tmp_path: Path) -> None:
    container = {
        "name": "c",
        "envFrom": [{"configMapRef": {"name": "c"}}],
        "env": [
            {"name": "B", "value": "[$(A)]"},
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "KEY", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
            {"name": "OLD", "valueFrom": {"secretKeyRef": {"name": "s", "key": "old", "optional": True}}},
        ],
    }
    env = container_env(container, IMAGE, facts(tmp_path))
    assert (env["A"], env["B"], env["IP"], env["KEY"]) == ("configmap", "[configmap]", "10.0.0.9", "secret")
    assert env["PATH"] == "/opt/venv/bin:/bin" and env["KUBERNETES_SERVICE_HOST"] == "10.96.0.1"
    assert "OLD" not in env


def test_a_missing_secret_key_stops_the_container_as_the_kubelet_does(tmp_path: Path) -> None:
    container = {"name": "c", "env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "gone", "key": "k"}}}]}
    with pytest.raises(AssertionError, match="CreateContainerConfigError"):
        container_env(container, IMAGE, facts(tmp_path))
