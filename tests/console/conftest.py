"""Fixtures for the console: fake providers for Handlers with no API server (those and the
adopted Pods come from tests/support/rigs/offline.py), the console's observer installed, the
process runtime pointed at those Handlers, a placement (never started) holding gated Pods, and
the populated console scenario of tests/support/rigs/console.py, one per test module."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from console import observer as console_observer
from console import runtime
from kube import names
from placement.blocklist import Blocklist
from placement.gated import Waiting
from placement.wiring import Placement
from providers.fake import FakeProvider
from tests.support.factories import make_pod
from tests.support.rigs.console import Scenario, populate, start, stop
from vnode.handler import Handler


@pytest.fixture
def fake_provider() -> Callable[..., FakeProvider]:
    def build(name: str, **scenario: Any) -> FakeProvider:
        options: dict[str, Any] = {"cloud": f"console-{uuid.uuid4().hex[:8]}"}
        if scenario:
            options["scenario"] = scenario
        return FakeProvider(name, options)

    return build


@pytest.fixture
def observer() -> Iterator[console_observer.ConsoleObserver]:
    installed = console_observer.install()
    yield installed
    console_observer.uninstall()


@pytest.fixture
def installed_runtime() -> Iterator[Callable[..., runtime.Runtime]]:
    """Publish Handlers and a Blocklist as runvnode would; cleared afterwards."""

    def install(
        *, handlers: list[Handler], blocklist: Blocklist | None = None, placement: Placement | None = None
    ) -> runtime.Runtime:
        runtime.install(handlers=handlers, blocklist=blocklist, placement=placement)
        return runtime.current()

    yield install
    runtime.clear()


@pytest.fixture
def holding_placement() -> Callable[..., Placement]:
    """A Placement as runvnode builds it, not started (no API server behind it): `hold(name,
    pool, waiting)` puts a gated Pod in its Pod cache and notes what it waits for, as its
    controller's workers do."""

    def build(*held: tuple[str, str, Waiting | None]) -> Placement:
        placement = Placement({}, kube=None, watch_kube=None, blocklist=Blocklist())  # type: ignore[arg-type]
        controller = placement.controller
        for name, pool, waiting in held:
            labels = {names.ENABLED_LABEL: "true", names.POOL_LABEL: pool}
            uid = waiting.uid if waiting is not None else str(uuid.uuid4())
            gates = [{"name": names.PLACEMENT_GATE}]
            pod = make_pod(name, namespace="default", uid=uid, labels=labels, schedulingGates=gates)
            controller.pods.cache[f"default/{name}"] = pod
            if waiting is not None:
                controller.gated.note(f"default/{name}", waiting)
        return placement

    return build


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scenario]:
    """The console scenario started and populated once for the test module that asks for it."""
    running = start(tmp_path_factory.mktemp("console"))
    try:
        populate(running)
        yield running
    finally:
        stop(running)
