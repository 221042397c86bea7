"""The one error vocabulary of the provider seam.

Every provider translates its SDK's, its HTTP client's and the operating system's
exceptions into these at the boundary (`raise ... from exc`); nothing else escapes a
provider method. The vnode decides retries from the type alone: `Unavailable` means
"could not ask" (design I3: never a create, a Failed phase or a delete), `Refused` and
its subclasses mean "asked, and the answer was no" (feeds the blocklist).
Tests: tests/providers/test_contract.py.
"""

from __future__ import annotations


class ProviderError(Exception):
    """Base of every error a provider may raise. Messages never carry secrets (I4)."""


class NotFound(ProviderError):
    """The provider answered: no such instance (or no such thing)."""


class Unavailable(ProviderError):
    """The provider could not be asked: timeout, connection refused, 5xx, throttling.

    `retry_after` is the provider's hint in seconds, or None for "use your backoff".
    """

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class Refused(ProviderError):
    """The provider answered and refused to provision. Feeds the blocklist."""


class NoCapacity(Refused):
    """No capacity for this offering (accelerator, tier, region) right now."""


class QuotaExceeded(Refused):
    """The account's quota for this kind of capacity is used up."""


class Unauthorized(Refused):
    """The provider rejected our credentials or permissions: nothing will work there."""


class InvalidRequest(ProviderError):
    """This Pod can never be served by this provider as written (bad image, bad size...)."""


class NotSupported(ProviderError):
    """The provider does not offer this operation or option."""
