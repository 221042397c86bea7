"""Fixtures for the local provider's tests: a provider on the test's own state folder, every
instance terminated and every leftover process killed after the test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from providers.local import LocalProvider
from tests.support.local_cleanup import kill_leftovers


@pytest.fixture
def provider(tmp_path: Path) -> Iterator[LocalProvider]:
    provider = LocalProvider("local", {"state_dir": str(tmp_path), "grace_period": 1})
    yield provider
    for instance in provider.list():
        provider.terminate(instance.id)
    kill_leftovers(tmp_path)
