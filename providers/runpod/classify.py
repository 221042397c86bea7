"""RunPod's failures as `providers.errors` types, and how widely a refusal blocks.

Called by `api.RunPodApi.run` (`translate`: every `runpod.error` type, every `requests`
exception, a JSON or GraphQL error body) and by `RunPodProvider.classify_provision_error`
(`classify`, pure). Messages are RunPod's words with the API key and env values scrubbed.
No capacity blocks the one offering (a spot refusal the Spot offering: a higher bid or
another data centre may work); a bid below the minimum blocks the Spot tier; credentials,
permissions and an empty balance block the whole provider.
Tests: tests/providers/runpod/test_runpod_provider_errors.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import requests

from providers import base
from providers.errors import (
    InvalidRequest,
    NoCapacity,
    NotFound,
    ProviderError,
    QuotaExceeded,
    Refused,
    Unauthorized,
    Unavailable,
)
from providers.runpod import sdk

NO_CAPACITY = ("no longer any instances available", "no instances available", "not enough", "out of stock")
LOW_BID = ("bid", "minimum")
QUOTA = ("balance", "insufficient funds", "spend limit", "quota")
AUTH = ("unauthorized", "api key", "permission", "forbidden")
NOT_FOUND = ("not found", "does not exist")
INVALID = ("syntax error", "cannot query field", "invalid", "no gpu found", "must be")


class LowBid(NoCapacity):
    """RunPod refused the spot bid as below the minimum (blocks the Spot tier)."""


def scrub(text: str, secrets: Sequence[str]) -> str:
    for secret in sorted((s for s in secrets if s and len(s) >= 4), key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


def translate(exc: BaseException, *, secrets: Sequence[str] = ()) -> ProviderError:
    """The seam's error for an SDK, HTTP or decoding failure."""
    if isinstance(exc, ProviderError):
        return exc
    if isinstance(exc, sdk.AuthenticationError):
        return Unauthorized(f"runpod: {scrub(str(exc), secrets)}")
    status = getattr(exc, "status", None)
    if isinstance(status, int):
        retry = getattr(exc, "retry_after", None)
        hint = float(retry) if isinstance(retry, str) and retry.isdigit() else None
        return Unavailable(f"runpod answered HTTP {status}", retry_after=hint)
    if isinstance(exc, sdk.QueryError):
        return _query_error(scrub(str(exc), secrets))
    if isinstance(exc, requests.Timeout):
        return Unavailable("runpod did not answer in time")
    if isinstance(exc, requests.ConnectionError):
        return Unavailable("runpod cannot be reached (connection failed)")
    if isinstance(exc, requests.RequestException | ValueError):  # JSONDecodeError is both
        return Unavailable(f"runpod's answer cannot be read ({type(exc).__name__})")
    return Unavailable(f"runpod: unexpected answer ({type(exc).__name__})")


# The first row whose words the message holds (any of them, or all of them) names the error.
_BY_WORDS: tuple[tuple[Callable[[Iterable[bool]], bool], Sequence[str], type[ProviderError]], ...] = (
    (any, NO_CAPACITY, NoCapacity),
    (all, LOW_BID, LowBid),
    (any, QUOTA, QuotaExceeded),
    (any, AUTH, Unauthorized),
    (any, NOT_FOUND, NotFound),
    (any, INVALID, InvalidRequest),
)


def _query_error(message: str) -> ProviderError:
    text = message.lower()
    said = f"runpod: {message}"
    for test, words, kind in _BY_WORDS:
        if test(word in text for word in words):
            return kind(said)
    if "try again" in text or "something went wrong" in text:
        return Unavailable(said)
    return Refused(said)


def classify(
    provider: str, err: ProviderError, *, accelerator: str | None, tier: base.Tier | None, region: str | None
) -> base.BlockScope:
    reason = f"{type(err).__name__}: {err}"
    if isinstance(err, Unauthorized | QuotaExceeded):
        return base.BlockScope(provider, base.BlockBreadth.PROVIDER, reason=reason)
    if isinstance(err, LowBid):
        return base.BlockScope(provider, base.BlockBreadth.TIER, tier=base.Tier.SPOT, reason=reason)
    if isinstance(err, NoCapacity):
        return base.no_capacity_scope(provider, reason, accelerator=accelerator, tier=tier, region=region)
    return base.default_block_scope(provider, err, accelerator=accelerator, tier=tier, region=region)
