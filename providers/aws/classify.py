"""How widely a refusal from EC2 blocks this provider (design §4, the failover table).

Called by `AwsProvider.classify_provision_error`; pure. Capacity errors (spot capacity
included) block the one offering in its region, SpotMaxPriceTooLow the Spot tier,
credentials, permissions and quotas the whole provider.
Tests: tests/providers/aws/test_aws.py.
"""

from __future__ import annotations

from providers import base
from providers.aws.ec2 import SPOT_PRICE_CODES, error_code
from providers.errors import NoCapacity, ProviderError, QuotaExceeded, Unauthorized


def classify(
    provider: str, err: ProviderError, *, accelerator: str | None, tier: base.Tier | None, region: str | None
) -> base.BlockScope:
    code = error_code(err)
    reason = f"{code or type(err).__name__}: {err}"
    if isinstance(err, Unauthorized | QuotaExceeded):
        return base.BlockScope(provider, base.BlockBreadth.PROVIDER, reason=reason)
    if code in SPOT_PRICE_CODES:
        return base.BlockScope(provider, base.BlockBreadth.TIER, tier=base.Tier.SPOT, reason=reason)
    if isinstance(err, NoCapacity):
        return base.no_capacity_scope(provider, reason, accelerator=accelerator, tier=tier, region=region)
    return base.default_block_scope(provider, err, accelerator=accelerator, tier=tier, region=region)
