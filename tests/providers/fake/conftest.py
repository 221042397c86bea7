"""The `rig` fixture of the fake provider's tests: each case in-process and over HTTP."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.rigs.fakecloud import Rigs


@pytest.fixture(params=["in-process", "http"])
def rig(request: pytest.FixtureRequest) -> Iterator[Rigs]:
    rigs = Rigs(over_http=request.param == "http")
    yield rigs
    rigs.close()
