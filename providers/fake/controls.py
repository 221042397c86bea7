"""The fake cloud's control vocabulary: one named method per fault or one-shot action
(refuse, outage, slow, hide, lose, exit, exit_container, put_file, remove_file), each a
call of `inject`.

Mixed into `FakeCloud`; called by tests in-process (over HTTP the same dicts go to
`POST /v1/faults`). Builds fault requests only: it never touches state itself.
Tests: tests/providers/fake/test_fake_cloud.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class Controls:
    """Shortcuts over `inject` (which the cloud defines)."""

    def inject(self, data: Mapping[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def refuse(self, reason: str = "capacity", **match: Any) -> dict[str, Any]:
        """Refuse provisions: `accelerator`, `tier`, `region` narrow it; `count`, `seconds` bound it."""
        return self.inject({"kind": "refuse", "reason": reason, **match})

    def outage(self, seconds: float | None = None) -> dict[str, Any]:
        return self.inject({"kind": "outage", "seconds": seconds})

    def slow(self, delay: float, seconds: float | None = None) -> dict[str, Any]:
        return self.inject({"kind": "slow", "delay": delay, "seconds": seconds})

    def hide(
        self, instance: str | None = None, *, claim: str | None = None, count: int | None = None, **bound: Any
    ) -> dict[str, Any]:
        """The next `count` (default 1) lists omit the instance; `get` still sees it."""
        return self.inject({"kind": "hide", "instance": instance, "claim": claim, "count": count, **bound})

    def lose(self, instance: str | None = None, *, claim: str | None = None, vanish: bool = False) -> dict[str, Any]:
        return self.inject({"kind": "lose", "instance": instance, "claim": claim, "vanish": vanish})

    def exit(self, instance: str | None = None, *, code: int, claim: str | None = None) -> dict[str, Any]:
        """The workload exits: every running container ends with `code`."""
        return self.inject({"kind": "exit", "instance": instance, "claim": claim, "code": code})

    def exit_container(
        self, instance: str | None, container: str, code: int, *, claim: str | None = None
    ) -> dict[str, Any]:
        """One running container exits with `code` (an init container that fails holds
        the sequence). NotFound for no such container, InvalidRequest if it is not running."""
        return self.inject({"kind": "exit", "instance": instance, "claim": claim, "code": code, "container": container})

    def put_file(
        self, instance: str | None, path: str, *, container: str = "", claim: str | None = None
    ) -> dict[str, Any]:
        """A file appears at `path` in `container` ("": the first app container), so a
        scripted `cat PATH` (an exec probe's command) exits 0."""
        return self.inject({"kind": "file", "instance": instance, "claim": claim, "container": container, "path": path})

    def remove_file(
        self, instance: str | None, path: str, *, container: str = "", claim: str | None = None
    ) -> dict[str, Any]:
        """The file at `path` goes; a scripted `cat PATH` then exits 1."""
        fault = {"kind": "file", "instance": instance, "claim": claim, "container": container, "path": path}
        return self.inject({**fault, "present": False})
