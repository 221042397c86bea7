"""pod_spec_from_dict(): the provider's view of a Pod, and Kubernetes quantities."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from providers.podspec import parse_quantity, pod_spec_from_dict


def make_pod(**overrides: Any) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "main",
        "image": "busybox",
        "command": ["sh", "-c"],
        "args": ["echo hi"],
        "ports": [{"containerPort": 8080}],
        "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"nvidia.com/gpu": "8"}},
    }
    container.update(overrides.pop("container", {}))
    pod: dict[str, Any] = {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u1", "labels": {"nebula.io/accelerator": "H100"}},
        "spec": {"containers": [container]},
    }
    pod.update(overrides)
    return pod


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("500m", Decimal("0.5")),
        ("2", Decimal(2)),
        ("1Gi", Decimal(2**30)),
        ("1k", Decimal(1000)),
        ("1e3", Decimal(1000)),
    ],
)
def test_quantities_parse_like_kubernetes(text: str, value: Decimal) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "abc", "1Xi", "--1"])
def test_malformed_quantity_is_a_value_error(text: str) -> None:
    with pytest.raises(ValueError, match="quantity"):
        parse_quantity(text)


def test_first_container_is_read_with_resources_and_accelerator() -> None:
    spec = pod_spec_from_dict(make_pod())
    assert (spec.namespace, spec.name, spec.uid, spec.container) == ("ns", "p", "u1", "main")
    assert spec.command == ("sh", "-c") and spec.args == ("echo hi",)
    assert spec.cpu == 0.5 and spec.memory == 2**30
    assert spec.accelerator == "h100" and spec.gpu_count == 8
    assert spec.ports == (8080,)


def test_pod_without_containers_is_refused() -> None:
    with pytest.raises(ValueError, match="no containers"):
        pod_spec_from_dict({"metadata": {"name": "p"}, "spec": {"containers": []}})
