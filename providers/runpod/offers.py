"""RunPod's `gpuTypes` answer as the seam's `Offering`s.

Called by `RunPodProvider.offerings`. Pure. OnDemand: `securePrice` (cloud SECURE),
`communityPrice` (COMMUNITY), the lower of the two (ALL); Spot: `lowestPrice.minimumBidPrice`
(per GPU, for one GPU). Prices are per GPU and hour, times the count. RunPod answers no
per-data-centre stock here, so every configured data centre is offered at the same price.
Tests: tests/providers/runpod/test_runpod_provider.py.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from providers import base
from providers.runpod.gpus import GPU_COUNTS, accelerator_for
from providers.runpod.options import RunPodOptions


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
                    result.append(base.Offering(accelerator_for(gpu_type), count, tier, region,
                                           None if price is None else round(price * count, 4),
                                           price is not None, gpu_type))  # fmt: skip
    return result
