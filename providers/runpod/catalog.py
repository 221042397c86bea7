"""What RunPod sells: Nebula accelerator names to RunPod GPU type ids, the CPU instance for a
GPU-less Pod, and RunPod's `gpuTypes` answer as the seam's `Offering`s.

Called by `RunPodProvider.provision` and `offerings`. Pure. Accelerator names are the
`nebula.io/accelerator` annotation's (lower case); a name not in `GPU_TYPES` is taken as a
RunPod GPU type id itself when it starts with `nvidia ` or `amd ` (so any type RunPod sells
can be asked for), else `InvalidRequest` names it. Offerings: OnDemand is `securePrice` (cloud
SECURE), `communityPrice` (COMMUNITY), the lower of the two (ALL); Spot is
`lowestPrice.minimumBidPrice` (per GPU, for one GPU). Prices are per GPU and hour, times the
count. RunPod answers no per-data-centre stock here, so every configured data centre is
offered at the same price.
Tests: tests/providers/runpod/test_runpod_provider_options.py, tests/providers/runpod/test_runpod_provider.py.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from providers import base
from providers.errors import InvalidRequest
from providers.runpod.options import RunPodOptions

GPU_TYPES: dict[str, str] = {
    "h100": "NVIDIA H100 80GB HBM3",
    "h100-sxm": "NVIDIA H100 80GB HBM3",
    "h100-pcie": "NVIDIA H100 PCIe",
    "h100-nvl": "NVIDIA H100 NVL",
    "h200": "NVIDIA H200",
    "b200": "NVIDIA B200",
    "a100-80gb": "NVIDIA A100-SXM4-80GB",
    "a100-80gb-pcie": "NVIDIA A100 80GB PCIe",
    "a100": "NVIDIA A100 80GB PCIe",
    "l40s": "NVIDIA L40S",
    "l40": "NVIDIA L40",
    "l4": "NVIDIA L4",
    "a40": "NVIDIA A40",
    "a6000": "NVIDIA RTX A6000",
    "rtxa6000": "NVIDIA RTX A6000",
    "a5000": "NVIDIA RTX A5000",
    "a4000": "NVIDIA RTX A4000",
    "rtx6000ada": "NVIDIA RTX 6000 Ada Generation",
    "rtx4090": "NVIDIA GeForce RTX 4090",
    "rtx3090": "NVIDIA GeForce RTX 3090",
    "rtx5090": "NVIDIA GeForce RTX 5090",
    "mi300x": "AMD Instinct MI300X OAM",
}
ACCELERATORS: dict[str, str] = {}  # GPU type id -> the first Nebula name for it
for _name, _type in GPU_TYPES.items():
    ACCELERATORS.setdefault(_type, _name)
GPU_COUNTS = (1, 2, 4, 8)  # the counts offered per GPU type
CPU_SIZES = (2, 4, 8, 16, 32)  # vCPUs of RunPod's CPU instances
MEMORY_PER_VCPU = {"c": 2, "g": 4, "m": 8}  # GiB per vCPU of each CPU family


def gpu_type_for(accelerator: str) -> str:
    """The RunPod GPU type id for a Nebula accelerator name (see the module doc)."""
    word = accelerator.strip().lower()
    if word in GPU_TYPES:
        return GPU_TYPES[word]
    if word.startswith(("nvidia ", "amd ")):
        return accelerator.strip()
    known = ", ".join(sorted(GPU_TYPES))
    raise InvalidRequest(f"the runpod provider has no GPU type for accelerator {accelerator!r} (known: {known})")


def accelerator_for(gpu_type: str) -> str:
    """The Nebula name of a RunPod GPU type id (the id itself, lower-cased, when unnamed)."""
    return ACCELERATORS.get(gpu_type, gpu_type.lower())


def cpu_instance_for(pod: base.PodSpec, flavor: str) -> str:
    """RunPod's CPU instance id (`cpu3g-4-16`) of the smallest size that holds the Pod's
    requests; InvalidRequest when none does."""
    per_vcpu = MEMORY_PER_VCPU[flavor[-1]]
    cores = pod.cpu or 0.0
    gib = (pod.memory or 0) / 2**30
    for size in CPU_SIZES:
        if size >= cores and size * per_vcpu >= gib:
            return f"{flavor}-{size}-{size * per_vcpu}"
    largest = CPU_SIZES[-1]
    raise InvalidRequest(
        f"the Pod asks for {math.ceil(cores)} CPUs and {math.ceil(gib)} GiB, more than the largest RunPod "
        f"{flavor} instance ({largest} vCPUs, {largest * per_vcpu} GiB): spec.containers[].resources"
    )


def _price(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) and value > 0 else None


def on_demand_price(entry: dict[str, Any], cloud: str) -> float | None:
    secure, community = _price(entry.get("securePrice")), _price(entry.get("communityPrice"))
    if cloud == "SECURE":
        return secure
    if cloud == "COMMUNITY":
        return community
    known = [p for p in (secure, community) if p is not None]
    return min(known) if known else None


def offerings_from(types: Iterable[Any], options: RunPodOptions) -> list[base.Offering]:
    result = []
    for entry in types:
        if not isinstance(entry, dict) or not entry.get("id"):
            continue
        gpu_type = str(entry["id"])
        on_demand = on_demand_price(entry, options.cloud_type)
        spot = _price((entry.get("lowestPrice") or {}).get("minimumBidPrice"))
        most_value = entry.get("maxGpuCount")
        most = most_value if isinstance(most_value, int) and most_value > 0 else max(GPU_COUNTS)
        for count in (c for c in GPU_COUNTS if c <= most):
            for region in options.regions:
                for tier, price in ((base.Tier.ON_DEMAND, on_demand), (base.Tier.SPOT, spot)):
                    result.append(
                        base.Offering(
                            accelerator_for(gpu_type),
                            count,
                            tier,
                            region,
                            None if price is None else round(price * count, 4),
                            price is not None,
                            gpu_type,
                        )
                    )
    return result
