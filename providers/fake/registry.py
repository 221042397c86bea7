"""The process-wide registry of in-process fake clouds, keyed by cloud name.

Called by `FakeProvider` so that a new provider object with the same cloud name sees
the same instances (a manager restart inside one process), and by tests to forget a
cloud. The first provider to name a cloud decides its scenario.
Tests: tests/providers/fake/test_fake_console.py.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from providers.fake.cloud import FakeCloud

_clouds: dict[str, FakeCloud] = {}
_lock = threading.Lock()


def cloud_named(name: str, create: Callable[[], FakeCloud]) -> FakeCloud:
    """The cloud called `name`, made by `create` the first time it is asked for."""
    with _lock:
        cloud = _clouds.get(name)
        if cloud is None:
            cloud = _clouds[name] = create()
        return cloud


def forget(name: str) -> None:
    """Drop the cloud called `name`; the next provider naming it starts a fresh one."""
    with _lock:
        _clouds.pop(name, None)
