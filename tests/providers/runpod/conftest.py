"""Fixtures for the RunPod provider's tests: `fake`, a fake RunPod (HTTP API and SSH-reachable
pods) in the test's folder, skipped where pods cannot run; a test file may define its own."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.providers.runpod.fake_runpod import FakeRunPod, start_fake_runpod
from tests.providers.runpod.runpod_pods import can_run_pods


@pytest.fixture(name="fake")
def fake_fixture(tmp_path: Path) -> Iterator[FakeRunPod]:
    reason = can_run_pods()
    if reason:
        pytest.skip(reason)
    with start_fake_runpod(folder=tmp_path / "runpod") as fake:
        yield fake
