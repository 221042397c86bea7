"""Current Spot prices per region from `DescribeSpotPriceHistory`, cached for a while.

Called by `AwsProvider.offerings`. When EC2 cannot say (no permission, throttled, down),
the prices are unknown (an empty mapping), never an error: offerings still list the tier.
Tests: tests/providers/aws/test_aws.py.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from datetime import UTC, datetime

from providers.aws.ec2 import Ec2
from providers.errors import ProviderError

logger = logging.getLogger(__name__)


class SpotPrices:
    """The lowest current Linux Spot price per instance type (any AZ), per region."""

    def __init__(self, ec2: Ec2, *, ttl: float) -> None:
        self._ec2 = ec2
        self._ttl = ttl
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[float, dict[str, float]]] = {}

    def in_region(self, region: str, instance_types: Sequence[str]) -> dict[str, float]:
        with self._lock:
            cached = self._cache.get(region)
        if cached is not None and cached[0] > time.monotonic():
            return cached[1]
        try:
            pages = self._ec2.pages(
                region,
                "describe_spot_price_history",
                InstanceTypes=list(instance_types),
                ProductDescriptions=["Linux/UNIX"],
                StartTime=datetime.now(UTC),
            )
        except ProviderError as exc:
            logger.info("spot prices in %s unknown: %s", region, exc)
            return {}
        prices: dict[str, float] = {}
        for page in pages:
            for item in page.get("SpotPriceHistory") or ():
                try:
                    price = float(item["SpotPrice"])
                except (KeyError, TypeError, ValueError):
                    continue
                kind = str(item.get("InstanceType"))
                prices[kind] = min(price, prices.get(kind, price))
        with self._lock:
            self._cache[region] = (time.monotonic() + self._ttl, prices)
        return prices
