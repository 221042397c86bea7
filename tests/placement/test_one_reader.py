"""One Pod, one answer: what placement's request sees, what the provider is asked for, the block
scope the provider builds when it refuses, and placement's blocklist lookup all agree.

The Pod is the one that used to disagree: `nebula.io/accelerator: " H100 "` with its
`nvidia.com/gpu: 8` on the SECOND container, placed on a tier spelled `spot`."""

from __future__ import annotations

from typing import Any

from kube import names
from placement.blocklist import Blocklist
from placement.optimizer import ProviderView, blocklist_lookup, decide
from placement.pools import NodePool, PoolProvider
from placement.request import WorkloadRequest, workload_request
from providers import errors, podspec
from providers.base import BlockBreadth, Offering, Tier
from providers.fake import FakeProvider
from providers.podspec import pod_spec_from_dict, requested_tier
from providers.shape import Shapes
from providers.shapecheck import SEVERAL, Need
from tests.support.factories import make_pod

NOW = 1_800_000_000.0


def disagreeing_pod() -> dict[str, Any]:
    """A Pod whose every reader could disagree: a padded upper-case accelerator, a lower-case
    tier, and the GPUs asked by its second container."""
    labels = {names.ENABLED_LABEL: "true", names.POOL_LABEL: "train", names.ACCELERATOR_LABEL: " H100 "}
    annotations = {names.CAPACITY_TYPE_ANNOTATION: "spot", names.REGION_ANNOTATION: "us-east-1"}
    containers = [
        {"name": "sidecar", "image": "log-shipper"},
        {"name": "trainer", "image": "train", "resources": {"limits": {"nvidia.com/gpu": "8"}}},
    ]
    return make_pod(
        "trainer",
        namespace="default",
        uid="u-1",
        labels=labels,
        annotations=annotations,
        containers=containers,
        schedulingGates=[{"name": names.PLACEMENT_GATE}],
    )


def test_placement_the_provider_and_the_blocklist_read_one_pod_alike() -> None:
    pod = disagreeing_pod()
    request = workload_request(pod)
    spec = pod_spec_from_dict(pod)
    several = Need("several containers", "spec.containers[1]", asks=(SEVERAL, ""))
    assert request == WorkloadRequest("h100", 8, (several,))
    assert (spec.accelerator, spec.gpu_count) == (request.accelerator, request.gpu_count)
    assert requested_tier(pod) is Tier.SPOT  # `spot` reads as Spot, here as in the vnode

    provider = FakeProvider("gpu-a", {"cloud": "one-reader"})
    scope = provider.classify_provision_error(
        errors.NoCapacity("sold out"), accelerator=spec.accelerator, tier=requested_tier(pod), region="us-east-1"
    )
    assert (scope.breadth, scope.accelerator, scope.tier, scope.region) == (
        BlockBreadth.OFFERING,
        "h100",
        Tier.SPOT,
        "us-east-1",
    )

    pool = NodePool("train", (PoolProvider("gpu-a"),), capacity_types=(Tier.SPOT,))
    offer = Offering("H100", 8, Tier.SPOT, "us-east-1", 10.0)
    views = {"gpu-a": ProviderView("gpu-a", (offer,), shapes=Shapes(several_containers=True))}
    blocklist = Blocklist(clock=lambda: NOW, uniform=lambda: 0.0, pool_ttl={"train": 60.0}.get)
    before = decide(pool, request, views, blocklist_lookup(blocklist, request.accelerator), now=NOW)
    assert before.chosen is not None and before.chosen.label() == "gpu-a Spot us-east-1"

    blocklist.record(provider.name, scope, pool=pod["metadata"]["labels"][names.POOL_LABEL])
    lookup = blocklist_lookup(blocklist, request.accelerator)
    assert lookup(before.chosen) == NOW + 60.0  # the provider's scope is the entry placement finds
    after = decide(pool, request, views, lookup, now=NOW)
    assert after.chosen is None and after.retry_at == NOW + 60.0


def test_the_pod_reader_spells_the_names_it_reads_as_kube_names_does() -> None:
    """providers may not import kube (an import contract), so podspec keeps its own spelling of
    the keys it reads; they must be the very keys every other writer and reader uses."""
    assert podspec.ACCELERATOR_LABEL == names.ACCELERATOR_LABEL
    assert podspec.CAPACITY_TYPE_ANNOTATION == names.CAPACITY_TYPE_ANNOTATION
