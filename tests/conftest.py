"""Project-wide pytest settings: nothing here may start services; packages own their fixtures."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

_MIRROR_DIR = tempfile.mkdtemp(prefix="nebula-test-mirror-")


def pytest_configure(config: pytest.Config) -> None:
    # Managers the tests start mirror into a database of this run, never into the developer's
    # `.nebula/console.sqlite3` (the one `make run` uses). A test that needs its own sets it.
    os.environ.setdefault("NEBULA_DB_PATH", os.path.join(_MIRROR_DIR, "console.sqlite3"))


def pytest_unconfigure(config: pytest.Config) -> None:
    shutil.rmtree(_MIRROR_DIR, ignore_errors=True)
