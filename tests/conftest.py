"""Project-wide pytest settings: nothing here may start services; shared fixtures live in
tests/support and are registered here, once."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

pytest_plugins = ["tests.support.fixtures", "tests.support.rigs.placement", "tests.support.servers.sshd"]

_mirror_dir: str | None = None


def pytest_configure(config: pytest.Config) -> None:
    # Managers the tests start mirror into a database of this run, never into the developer's
    # `.nebula/console.sqlite3` (the one `make run` uses). A test that needs its own sets it.
    global _mirror_dir
    if "NEBULA_DB_PATH" not in os.environ:
        _mirror_dir = tempfile.mkdtemp(prefix="nebula-test-mirror-")
        os.environ["NEBULA_DB_PATH"] = os.path.join(_mirror_dir, "console.sqlite3")


def pytest_unconfigure(config: pytest.Config) -> None:
    if _mirror_dir is not None:
        shutil.rmtree(_mirror_dir, ignore_errors=True)


@pytest.fixture(autouse=True)
def _a_fresh_event_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test's recorders share a process budget of their own (kube.eventbudget): Events that
    an earlier test left waiting neither count against it nor are dropped by it."""
    from kube import eventbudget, events

    fresh = eventbudget.EventBudget()
    monkeypatch.setattr(eventbudget, "PROCESS_BUDGET", fresh)
    monkeypatch.setattr(events, "PROCESS_BUDGET", fresh)
