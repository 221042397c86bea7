"""What an opted-in Pod asks for, and which Pods placement acts on."""

from __future__ import annotations

from typing import Any

import pytest

from kube import names
from placement.request import RequestError, WorkloadRequest, is_placeable, is_replaceable_failure, workload_request
from tests.support.factories import make_pod


def pod(labels: dict[str, str] | None = None, limits: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    """An opted-in Pod (plus `labels`) whose one container has `limits`."""
    return make_pod(
        "p",
        namespace="default",
        labels={names.ENABLED_LABEL: "true", **(labels or {})},
        container={"resources": {"limits": limits or {}}},
        **spec,
    )


@pytest.mark.parametrize(
    ("labels", "limits", "expected"),
    [
        ({}, {}, WorkloadRequest(None, 0)),
        ({names.ACCELERATOR_LABEL: "H100"}, {"nvidia.com/gpu": "8"}, WorkloadRequest("h100", 8)),
        ({names.ACCELERATOR_LABEL: "h100"}, {}, WorkloadRequest("h100", 1)),
    ],
)
def test_workload_request_from_label_and_gpu_limit(
    labels: dict[str, str], limits: dict[str, str], expected: WorkloadRequest
) -> None:
    assert workload_request(pod(labels, limits)) == expected


def test_gpu_count_without_accelerator_is_an_error_not_cpu_only() -> None:
    with pytest.raises(RequestError, match="has no nebula.io/accelerator label"):
        workload_request(pod({}, {"nvidia.com/gpu": "2"}))
    with pytest.raises(RequestError, match="whole number"):
        workload_request(pod({names.ACCELERATOR_LABEL: "h100"}, {"nvidia.com/gpu": "two"}))


def test_only_gated_unbound_opted_in_pods_are_placeable() -> None:
    gate = [{"name": names.PLACEMENT_GATE}]
    assert is_placeable(pod(schedulingGates=gate))
    assert not is_placeable(pod())
    assert not is_placeable(pod(schedulingGates=gate, nodeName="n"))
    assert not is_placeable(pod({names.ENABLED_LABEL: "yes"}, schedulingGates=gate))


def test_only_controller_owned_provision_failures_are_replaced() -> None:
    failed = pod()
    failed["status"] = {"phase": "Failed", "reason": names.REASON_PROVISION_FAILED}
    assert not is_replaceable_failure(failed)  # a bare Pod stays Failed as the record
    failed["metadata"]["ownerReferences"] = [{"kind": "ReplicaSet", "controller": True, "uid": "u", "name": "rs"}]
    assert is_replaceable_failure(failed)
    failed["status"]["reason"] = "InstanceLost"
    assert not is_replaceable_failure(failed)
