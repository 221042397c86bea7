"""A provider behind a fence: its mutating calls (`provision`, `terminate`, `restart`,
`stop_container`) ask the fence first and, when it is no longer valid, raise `Unavailable`
(the callers' retry path: a Pod is never failed for it), so a replica whose node Lease ran
out changes no instance; reads, logs and streams pass. Every other attribute is the provider's own, so
the optional capabilities (`isinstance(provider, Executor)` and the rest) are exactly the
wrapped provider's. Built by `nebula_site.manager.runners.build_runner` for each Runner `kube.sharing` starts.
Tests: tests/kube/test_leases.py.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, cast

from providers.base import Provider
from providers.errors import Unavailable

MUTATIONS = frozenset({"provision", "terminate", "restart", "stop_container"})


class FencedProvider:
    def __init__(self, provider: Provider, valid: Callable[[], bool], lease: str) -> None:
        self._provider = provider
        self._valid = valid
        self._lease = lease

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._provider, name)
        if name not in MUTATIONS:
            return value

        @functools.wraps(value)
        def fenced(*args: Any, **kwargs: Any) -> Any:
            if not self._valid():
                raise Unavailable(f"lease {self._lease} is not held (or ran out): not changing instances")
            return value(*args, **kwargs)

        return fenced


def fenced(provider: Provider, valid: Callable[[], bool], lease: str) -> Provider:
    """`provider` with its mutations allowed only while `valid()`: the Lease `lease` is held."""
    # A cast: every Provider member resolves through __getattr__, which mypy cannot see.
    return cast(Provider, FencedProvider(provider, valid, lease))
