"""vnode.phases.context: the provider's traits are asked once, on first use (building the context does
no I/O); the poll interval flag overrides the provider's; restarts are in place only for a
provider that says so and implements `Restarter`."""

from __future__ import annotations

from typing import Any, cast

from providers.base import Capabilities, Provider
from vnode.phases.context import Traits


class Counting:
    name = "counting"

    def __init__(self, capabilities: Capabilities) -> None:
        self.asked = 0
        self._capabilities = capabilities

    def capabilities(self) -> Capabilities:
        self.asked += 1
        return self._capabilities


class Restarting(Counting):
    def restart(self, instance_id: Any, *, container: str = "") -> None: ...


def test_capabilities_are_asked_once_on_first_use() -> None:
    provider = Counting(Capabilities(poll_interval=7.0))
    traits = Traits(cast(Provider, provider))
    assert provider.asked == 0
    assert traits.poll_interval() == 7.0 and traits.capabilities().poll_interval == 7.0
    traits.rules()
    assert provider.asked == 1
    assert Traits(cast(Provider, provider), poll_interval=0.5).poll_interval() == 0.5


def test_restarts_are_in_place_only_where_the_provider_can_restart() -> None:
    caps = Capabilities(restarts_in_place=True, bills_after_exit=True)
    assert not Traits(cast(Provider, Counting(caps))).rules().in_place
    rules = Traits(cast(Provider, Restarting(caps))).rules()
    assert rules.in_place and rules.bills
