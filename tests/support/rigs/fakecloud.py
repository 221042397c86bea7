"""The fake cloud on a hand-moved clock, reached by a FakeProvider in-process or over HTTP,
for the tests of `providers.fake` that run each case both ways (the `rig` fixture of
tests/providers/fake/conftest.py makes these). Nothing here is a test.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from providers.base import Instance, InstanceId
from providers.fake import FakeProvider
from providers.fake.cloud import FakeCloud
from providers.fake.registry import cloud_named, forget
from providers.fake.scenario import load_scenario
from providers.fake.server import start_server
from providers.shape import ContainerFacts, ContainerState
from tests.support.clock import ManualClock

START = 1_700_000_000.0  # the clock's reading when a rig is made


@dataclass
class Rig:
    """A fake cloud on an injected clock, the provider reaching it, and the cloud itself for
    control calls (in-process: the shared cloud; over HTTP: the one behind the service)."""

    provider: FakeProvider
    cloud: FakeCloud
    clock: ManualClock

    def get(self, instance_id: InstanceId) -> Instance:
        found = self.provider.get(instance_id)
        assert found is not None
        return found

    def facts(self, instance_id: InstanceId) -> dict[str, ContainerFacts]:
        return {c.name: c for c in self.get(instance_id).containers}

    def states(self, instance_id: InstanceId) -> dict[str, tuple[ContainerState, int]]:
        return {c.name: (c.state, c.runs) for c in self.get(instance_id).containers}


@dataclass
class Rigs:
    """Makes rigs of one kind (`over_http`); `close` ends every cloud and server it made."""

    over_http: bool
    closers: list[Callable[[], None]] = field(default_factory=list)

    def __call__(self, scenario: dict[str, Any], **options: Any) -> Rig:
        clock = ManualClock(START)
        if self.over_http:
            server = start_server(scenario=scenario, clock=clock)
            self.closers.append(server.close)
            return Rig(FakeProvider("gpu", {"url": server.url, **options}), server.cloud, clock)
        name = f"rig-{uuid.uuid4().hex}"
        cloud = cloud_named(name, lambda: FakeCloud(load_scenario(scenario), clock=clock))
        self.closers.append(lambda: forget(name))
        return Rig(FakeProvider("gpu", {"cloud": name, **options}), cloud, clock)

    def close(self) -> None:
        for close in self.closers:
            close()
