"""A provider that answers `InvalidRequest` for one shape: a `FakeProvider` whose `provision` of
a Pod asking for `accelerator` raises `errors.InvalidRequest` (a cloud saying "this request can
never be served as asked", as EC2's `InvalidParameterCombination` does) before the fake cloud
is asked. Everything else, offerings included, is the fake's, so placement still offers it.

Used by tests/placement/test_e2e_invalid_request.py. Once the fake cloud's own `refuse` knows
the reason `invalid`, `cloud.refuse("invalid", accelerator=...)` can stand in for this wrapper.
"""

from __future__ import annotations

import builtins
import threading
from collections.abc import Sequence

from providers import errors
from providers.base import (
    BlockScope,
    Capabilities,
    Instance,
    InstanceId,
    Offering,
    PodSpec,
    ProvisionRequest,
    ProvisionResult,
    Tier,
)
from providers.errors import ProviderError
from providers.fake import FakeProvider
from providers.owner import Owner


class InvalidShapeProvider:
    """`provision` of `accelerator` is InvalidRequest; `refused` counts those answers."""

    def __init__(self, fake: FakeProvider, *, accelerator: str) -> None:
        self.fake = fake
        self.cloud = fake.cloud
        self._accelerator = accelerator.casefold()
        self._lock = threading.Lock()
        self.refused = 0

    @property
    def name(self) -> str:
        return self.fake.name

    @property
    def owner(self) -> Owner:
        return self.fake.owner

    def capabilities(self) -> Capabilities:
        return self.fake.capabilities()

    def provision(self, pod: PodSpec, request: ProvisionRequest) -> ProvisionResult:
        if pod.accelerator == self._accelerator:
            with self._lock:
                self.refused += 1
            tier = request.capacity_type.value if request.capacity_type else "any tier"
            raise errors.InvalidRequest(
                f"{self.name}: {pod.accelerator} x{pod.gpu_count} cannot be launched as {tier} in {request.region}"
            )
        return self.fake.provision(pod, request)

    def terminate(self, instance_id: InstanceId) -> None:
        self.fake.terminate(instance_id)

    def get(self, instance_id: InstanceId) -> Instance | None:
        return self.fake.get(instance_id)

    def list(self) -> builtins.list[Instance]:
        return self.fake.list()

    def offerings(self) -> builtins.list[Offering]:
        return self.fake.offerings()

    def expand_regions(self, declared: Sequence[str]) -> builtins.list[str]:
        return self.fake.expand_regions(declared)

    def classify_provision_error(
        self, err: ProviderError, *, accelerator: str | None, tier: Tier | None, region: str | None
    ) -> BlockScope:
        return self.fake.classify_provision_error(err, accelerator=accelerator, tier=tier, region=region)
