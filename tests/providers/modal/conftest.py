"""Fixtures of the fake Modal's own tests: `fake`, a running fake (V1 sandboxes), and `client`,
a real `modal.Client` for it (tests/providers/modal/modal_fake_rig.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from providers.modal.fake import FakeModal
from tests.providers.modal.modal_fake_rig import client_for, fake_modal


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeModal]:
    yield from fake_modal(monkeypatch)


@pytest.fixture
def client(fake: FakeModal) -> Iterator[Any]:
    yield from client_for(fake)
