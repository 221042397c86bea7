"""The one Pod reader's rules: a Pod's effective request as the API server and kubelet count it,
the accelerator label folded, GPU counts that are refused, and every tier spelling."""

from __future__ import annotations

from typing import Any

import pytest

from providers.base import Tier
from providers.podspec import effective_request, pod_spec_from_dict, requested_tier

GPU = "nvidia.com/gpu"


def container(name: str = "c", *, requests: dict[str, str] | None = None, **limits: str) -> dict[str, Any]:
    """A container; keyword arguments are limits (`gpu=` spells nvidia.com/gpu)."""
    resources: dict[str, Any] = {}
    if requests:
        resources["requests"] = {GPU if k == "gpu" else k: v for k, v in requests.items()}
    if limits:
        resources["limits"] = {GPU if k == "gpu" else k: v for k, v in limits.items()}
    return {"name": name, "image": "i", "resources": resources}


def sidecar(name: str = "s", **limits: str) -> dict[str, Any]:
    return {**container(name, **limits), "restartPolicy": "Always"}


def pod(
    *containers: dict[str, Any],
    init: tuple[dict[str, Any], ...] = (),
    accelerator: str | None = "h100",
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    labels = {} if accelerator is None else {"nebula.io/accelerator": accelerator}
    spec: dict[str, Any] = {"containers": list(containers) or [container()]}
    if init:
        spec["initContainers"] = list(init)
    return {"metadata": {"name": "p", "labels": labels, "annotations": annotations or {}}, "spec": spec}


@pytest.mark.parametrize(
    ("case", "pod_dict", "accelerator", "gpus", "cpu"),
    [
        ("one container, limit", pod(container(gpu="8", cpu="2")), "h100", 8, 2.0),
        ("the count on the SECOND container", pod(container("a"), container("b", gpu="8")), "h100", 8, None),
        (
            "app containers sum",
            pod(container("a", gpu="2", cpu="1"), container("b", gpu="3", cpu="500m")),
            "h100",
            5,
            1.5,
        ),
        ("request without limit", pod(container(requests={"gpu": "4", "cpu": "3"})), "h100", 4, 3.0),
        ("request wins over limit", pod(container(requests={"cpu": "1"}, cpu="4")), "h100", 1, 1.0),
        ("a larger init container wins", pod(container(gpu="2"), init=(container("i", gpu="4"),)), "h100", 4, None),
        (
            "a smaller init container does not",
            pod(container(gpu="4"), init=(container("i", gpu="2"),)),
            "h100",
            4,
            None,
        ),
        (
            "init containers max, not sum",
            pod(container(gpu="1"), init=(container("i", gpu="3"), container("j", gpu="3"))),
            "h100",
            3,
            None,
        ),
        ("sidecars add to the apps", pod(container(gpu="2"), init=(sidecar(gpu="1"),)), "h100", 3, None),
        (
            "a sidecar before an init adds to it",
            pod(container(gpu="1"), init=(sidecar(gpu="1"), container("i", gpu="3"))),
            "h100",
            4,
            None,
        ),
        (
            "a sidecar after an init does not",
            pod(container(gpu="1"), init=(container("i", gpu="3"), sidecar(gpu="1"))),
            "h100",
            3,
            None,
        ),
        ("type without a count means one GPU", pod(container(cpu="1")), "h100", 1, 1.0),
        ("white space and case folded", pod(container(gpu="8"), accelerator=" H100 "), "h100", 8, None),
        ("mixed case", pod(container(gpu="1"), accelerator="A100-80gb"), "a100-80gb", 1, None),
        ("a blank label is no accelerator", pod(container(cpu="1"), accelerator="  "), None, 0, 1.0),
        ("no label, no count: cpu only", pod(container(cpu="250m"), accelerator=None), None, 0, 0.25),
        ("an explicit zero with no label", pod(container(gpu="0"), accelerator=None), None, 0, None),
    ],
)
def test_effective_request_follows_kubernetes(
    case: str, pod_dict: dict[str, Any], accelerator: str | None, gpus: int, cpu: float | None
) -> None:
    spec = pod_spec_from_dict(pod_dict)
    assert (spec.accelerator, spec.gpu_count, spec.cpu) == (accelerator, gpus, cpu), case


def test_memory_is_the_pods_effective_request_in_bytes() -> None:
    spec = pod_spec_from_dict(pod(container("a", memory="1Gi"), container("b", requests={"memory": "512Mi"})))
    assert spec.memory == 3 * 2**29


def test_a_resource_no_container_names_is_none() -> None:
    assert effective_request({"containers": [container()]}, "cpu") is None
    assert effective_request({"containers": [container()], "initContainers": [container(cpu="1")]}, "cpu") == 1


def test_the_program_is_the_first_containers() -> None:
    spec = pod_spec_from_dict(pod(container("main", gpu="1"), container("side", gpu="1")))
    assert spec.container == "main" and spec.gpu_count == 2


@pytest.mark.parametrize(
    ("pod_dict", "message"),
    [
        (pod(container(gpu="2"), accelerator=None), "asks for 2 nvidia.com/gpu but has no nebula.io/accelerator label"),
        (pod(container("a"), container("b", gpu="1"), accelerator=" "), "has no nebula.io/accelerator label"),
        (pod(container(gpu="two")), "nvidia.com/gpu must be a whole number of GPUs, not 'two'"),
        (pod(container(gpu="1.5")), "nvidia.com/gpu must be a whole number of GPUs, not '1.5'"),
        (pod(container(gpu="500m")), "nvidia.com/gpu must be a whole number"),
        (pod(container(gpu="-1")), r"nvidia.com/gpu must not be negative \(got '-1'\)"),
        (pod(container(), init=(container("i", gpu="x"),)), "nvidia.com/gpu must be a whole number"),
        (pod(container(cpu="lots")), "container 'c' resources.limits.cpu: 'lots' is not a Kubernetes quantity"),
    ],
)
def test_refused_counts_are_value_errors_naming_the_field(pod_dict: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        pod_spec_from_dict(pod_dict)


@pytest.mark.parametrize(
    ("text", "tier"),
    [
        ("Spot", Tier.SPOT),
        ("spot", Tier.SPOT),
        (" SPOT ", Tier.SPOT),
        ("OnDemand", Tier.ON_DEMAND),
        ("on-demand", Tier.ON_DEMAND),
        ("on_demand", Tier.ON_DEMAND),
        ("ondemand", Tier.ON_DEMAND),
        ("reserved", None),
        ("", None),
    ],
)
def test_the_capacity_type_annotation_reads_every_tier_spelling(text: str, tier: Tier | None) -> None:
    assert requested_tier(pod(annotations={"nebula.io/capacity-type": text})) is tier


def test_no_capacity_type_annotation_is_no_tier() -> None:
    assert requested_tier(pod()) is None
    assert requested_tier({}) is None
