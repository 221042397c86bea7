"""Faults the fake cloud can be told to show: what each kind is and when it applies, and
`Controls`, the named control calls (refuse, outage, slow, hide, lose, interrupt, exit,
exit_container, put_file, remove_file) that each build one `inject` request.

Parsed from control requests (`inject`) by `parse_fault`; held and applied by the cloud, which
mixes `Controls` in (tests call it in-process; over HTTP the same dicts go to `POST /v1/faults`).
Pure values and matching: a fault never touches instances or the clock itself.
Tests: tests/providers/fake/test_fake_cloud.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from providers import base, errors
from providers.fake.scenario import OfferingSpec, parse_tier
from providers.notices import NoticeKind

# Held until cleared or expired (or, counted, used up), applied to every matching call.
STANDING_KINDS = ("refuse", "outage", "slow", "hide")
# Done to an instance at once; listed in the call log, not held.
ACTION_KINDS = ("lose", "interrupt", "exit", "file")
DEFAULT_NOTICE = 120.0  # interrupt: seconds from the notice to the deadline
MAX_NOTICE = 7 * 86400.0
REFUSE_REASONS: Mapping[str, type[errors.ProviderError]] = {
    "capacity": errors.NoCapacity,
    "auth": errors.Unauthorized,
    "quota": errors.QuotaExceeded,
    "invalid": errors.InvalidRequest,  # this shape can never be served here
    "unsupported": errors.NotSupported,
}


@dataclass(frozen=True)
class Fault:
    """A standing fault. `until` is a clock time (None: until cleared); `remaining` counts
    the refusals, or the lists hidden from, left (None: unlimited)."""

    id: str
    kind: str
    reason: str | None = None  # refuse: one of REFUSE_REASONS
    accelerator: str | None = None  # refuse: match; None = any
    tier: base.Tier | None = None
    region: str | None = None
    remaining: int | None = None
    until: float | None = None
    delay: float = 0.0  # slow: seconds every call sleeps
    instance: str | None = None  # hide: the instance id, or
    claim: str | None = None  # ... every instance of this claim

    def active(self, now: float) -> bool:
        return (self.until is None or now < self.until) and (self.remaining is None or self.remaining > 0)

    def refuses(self, spec: OfferingSpec) -> bool:
        return (
            self.kind == "refuse"
            and (self.accelerator is None or self.accelerator == (spec.accelerator or "cpu"))
            and (self.tier is None or self.tier is spec.tier)
            and (self.region is None or self.region == spec.region)
        )

    def hides(self, instance_id: str, claim: str) -> bool:
        """True if this fault keeps the instance out of `list` (it still runs; `get` sees it)."""
        return self.kind == "hide" and (
            self.instance == instance_id or (self.claim is not None and self.claim == claim)
        )

    def error(self, spec: OfferingSpec) -> errors.ProviderError:
        shape = f"{spec.accelerator or 'cpu'} x{spec.gpu_count} {spec.tier.value} in {spec.region}"
        if self.reason == "auth":
            return errors.Unauthorized(f"fake: credentials rejected (fault {self.id})")
        if self.reason == "quota":
            return errors.QuotaExceeded(f"fake: quota exceeded for {shape} (fault {self.id})")
        if self.reason == "invalid":
            return errors.InvalidRequest(f"fake: {shape} cannot be served as asked (fault {self.id})")
        if self.reason == "unsupported":
            return errors.NotSupported(f"fake: {shape} is not supported here (fault {self.id})")
        return errors.NoCapacity(f"fake: no capacity for {shape} (fault {self.id})")

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["tier"] = self.tier.value if self.tier else None
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Fault:
        values = dict(data)
        values["tier"] = parse_tier(values["tier"]) if values.get("tier") else None
        return cls(**values)


@dataclass(frozen=True)
class Action:
    """A one-shot fault on one instance (by id or claim): `lose` it, make it `exit` (with
    `container`, only that container exits), or put a `file` at `path` in a container (or
    with `present` false, remove it): what a scripted exec probe such as `cat` finds; or
    `interrupt` it (or `count` live instances, of `tier`) with `notice` seconds of notice
    of `notice_kind` (a `providers.notices.NoticeKind` value)."""

    kind: str
    instance: str | None = None
    claim: str | None = None
    code: int = 0  # exit: the workload's (or the container's) exit code
    container: str | None = None  # exit: only this container; file: the container ("": the first app one)
    path: str = ""  # file: its absolute path
    present: bool = True  # file: put it there (True) or remove it
    vanish: bool = False  # lose: gone at once instead of TERMINATED
    count: int | None = None  # interrupt: this many live instances, oldest first (instead of one named)
    tier: base.Tier | None = None  # interrupt with count: only instances of this tier
    notice: float = DEFAULT_NOTICE  # interrupt: seconds until the deadline
    notice_kind: str = "SpotInterruption"  # interrupt: the NoticeKind value


def parse_fault(data: Mapping[str, Any], *, fault_id: str, now: float) -> Fault | Action:
    """A fault from a control request; ValueError names what is wrong.

    Keys: `kind`; refuse: `reason` (capacity|auth|quota|invalid|unsupported), `accelerator`,
    `tier`, `region`, `count`, `seconds`; outage: `seconds`; slow: `delay`, `seconds`; hide:
    `instance` or `claim`, `count` (lists to hide from, default 1), `seconds`; lose:
    `instance` or `claim`, `vanish`; interrupt: `instance`, `claim` or `count` (with `tier`),
    `notice` (seconds, default 120), `notice_kind`; exit: `instance` or `claim`, `code`, `container`;
    file: `instance` or `claim`, `container`, `path`, `present`."""
    kind = data.get("kind")
    if kind == "interrupt":
        return _parse_interrupt(data)
    if kind in ACTION_KINDS:
        if not data.get("instance") and not data.get("claim"):
            raise ValueError(f"{kind}: name an 'instance' id or a 'claim'")
        if kind == "file" and not str(data.get("path") or "").startswith("/"):
            raise ValueError("file: 'path' must be an absolute path")
        return Action(
            kind=str(kind),
            instance=_text(data.get("instance")),
            claim=_text(data.get("claim")),
            code=_integer(data.get("code", 0), "code"),
            vanish=bool(data.get("vanish", False)),
            container=_text(data.get("container")) if kind == "exit" else str(data.get("container") or ""),
            path=str(data.get("path") or ""),
            present=bool(data.get("present", True)),
        )
    if kind not in STANDING_KINDS:
        raise ValueError(f"unknown fault kind {kind!r} (one of {', '.join(STANDING_KINDS + ACTION_KINDS)})")
    seconds = data.get("seconds")
    until = None if seconds is None else now + _positive(seconds, "seconds")
    if kind == "refuse":
        reason = str(data.get("reason", "capacity"))
        if reason not in REFUSE_REASONS:
            raise ValueError(f"refuse: unknown reason {reason!r} (one of {', '.join(REFUSE_REASONS)})")
        count = data.get("count")
        accelerator = _text(data.get("accelerator"))
        return Fault(
            id=fault_id,
            kind="refuse",
            reason=reason,
            accelerator=accelerator.lower() if accelerator else None,
            tier=parse_tier(data["tier"]) if data.get("tier") else None,
            region=_text(data.get("region")),
            remaining=None if count is None else _integer(count, "count", minimum=1),
            until=until,
        )
    if kind == "hide":
        if not data.get("instance") and not data.get("claim"):
            raise ValueError("hide: name an 'instance' id or a 'claim'")
        count = data.get("count")
        if count is None and until is None:
            count = 1  # one list by default; with only `seconds`, every list until then
        return Fault(
            id=fault_id,
            kind="hide",
            instance=_text(data.get("instance")),
            claim=_text(data.get("claim")),
            remaining=None if count is None else _integer(count, "count", minimum=1),
            until=until,
        )
    if kind == "slow":
        return Fault(id=fault_id, kind="slow", delay=_positive(data.get("delay", 1.0), "delay"), until=until)
    return Fault(id=fault_id, kind="outage", until=until)


def _parse_interrupt(data: Mapping[str, Any]) -> Action:
    count = data.get("count")
    if count is None and not data.get("instance") and not data.get("claim"):
        raise ValueError("interrupt: name an 'instance' id, a 'claim', or a 'count' of live instances")
    if count is not None and (data.get("instance") or data.get("claim")):
        raise ValueError("interrupt: give a 'count' or name an instance or claim, not both")
    if data.get("tier") and count is None:
        raise ValueError("interrupt: 'tier' narrows a 'count'")
    raw = data.get("notice")
    notice = DEFAULT_NOTICE if raw is None else _positive(raw, "notice") if raw != 0 else 0.0
    if notice > MAX_NOTICE:
        raise ValueError(f"interrupt: 'notice' is 0..{MAX_NOTICE:g} seconds")
    kind = str(data.get("notice_kind") or NoticeKind.SPOT_INTERRUPTION.value)
    if kind not in {k.value for k in NoticeKind}:
        raise ValueError(f"interrupt: unknown notice_kind {kind!r} (one of {', '.join(k.value for k in NoticeKind)})")
    return Action(
        kind="interrupt",
        instance=_text(data.get("instance")),
        claim=_text(data.get("claim")),
        count=None if count is None else _integer(count, "count", minimum=1),
        tier=parse_tier(data["tier"]) if data.get("tier") else None,
        notice=notice,
        notice_kind=kind,
    )


def _text(value: Any) -> str | None:
    return None if value is None or value == "" else str(value)


def _integer(value: Any, name: str, *, minimum: int | None = None) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be an integer, not {value!r}") from exc
    if minimum is not None and number < minimum:
        raise ValueError(f"{name} must be at least {minimum}")
    return number


def _positive(value: Any, name: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a number, not {value!r}") from exc
    if not number > 0:
        raise ValueError(f"{name} must be positive")
    return number


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

    def interrupt(
        self,
        instance: str | None = None,
        *,
        claim: str | None = None,
        count: int | None = None,
        tier: str | None = None,
        notice: float = DEFAULT_NOTICE,
        notice_kind: str = "SpotInterruption",
    ) -> dict[str, Any]:
        """A notice now, the instance taken `notice` seconds later (a rebalance takes none):
        the one named, or `count` live instances (of `tier`), oldest first."""
        fault = {"instance": instance, "claim": claim, "count": count, "tier": tier, "notice": notice}
        return self.inject({"kind": "interrupt", **fault, "notice_kind": notice_kind})

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
