"""Fixtures for the console: fake providers for Handlers with no API server (those and the
adopted Pods come from tests/support/handlers.py), the console's observer installed, and the
process runtime pointed at those Handlers."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from console import observer as console_observer
from console import runtime
from placement.blocklist import Blocklist
from providers.fake import FakeProvider
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

    def install(*, handlers: list[Handler], blocklist: Blocklist | None = None) -> runtime.Runtime:
        runtime.install(handlers=handlers, blocklist=blocklist)
        return runtime.current()

    yield install
    runtime.clear()
