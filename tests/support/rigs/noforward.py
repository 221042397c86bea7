"""`NoForwardProvider`: the fake cloud without the optional PortForwarder protocol, for the
tests of what a user sees when a provider cannot port-forward. Not a product module."""

from __future__ import annotations

from providers.fake import FakeProvider


class NoForwardProvider(FakeProvider):
    """A runtime-checkable protocol treats a callable member set to None as absent."""

    port_forward = None  # type: ignore[assignment]  # removes the capability, as a provider without it
