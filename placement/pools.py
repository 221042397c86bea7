"""NodePool objects (`nebula.io/v1alpha1`) parsed into frozen values, with messages a person can act on.

Pure: called by the pool cache for every NodePool it sees, and by tests. The CRD's schema
rejects most mistakes at the API server; this module checks again because a cluster may
skip schemas (the devcluster does) and because placement must never act on a bad pool.
Tested in tests/placement/test_pools.py::test_invalid_pools_say_which_field_and_how_to_fix_it
and tests/placement/test_budget_spec.py::test_a_bad_budget_names_the_field_and_the_fix.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from placement import blocklist
from placement.durations import PoolError as PoolError
from placement.durations import bounded_duration, fields_of
from placement.durations import format_duration as format_duration
from placement.durations import parse_duration as parse_duration
from placement.interruptspec import FAILOVER_FIELDS, Interruption, interruption, wait_for_capacity
from placement.spendview import BudgetView
from providers import egress as egress_policy
from providers.base import Tier
from providers.egress import OPEN, Egress, EgressMode

DEFAULT_BLOCKLIST_TTL = blocklist.DEFAULT_TTL  # a pool without failover.blocklistTTL: 5m
MIN_TTL, MAX_TTL = 1.0, 86_400.0
DEFAULT_PROVISIONING_TIMEOUT = 600.0  # a pool without spec.provisioningTimeout: 10m
MIN_PROVISIONING_TIMEOUT, MAX_PROVISIONING_TIMEOUT = 1.0, 86_400.0
MAX_PROVIDERS = 16
MAX_REGIONS = 64
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


class Strategy(str, enum.Enum):
    ORDERED = "Ordered"  # tiers, then providers, then regions, in listed order
    LOWEST_PRICE = "LowestPrice"  # every candidate by hourly price; ties in listed order


@dataclass(frozen=True)
class PoolProvider:
    name: str
    regions: tuple[str, ...] = ()  # as declared; group tokens are expanded by the provider


class OnExceeded(str, enum.Enum):
    HOLD = "Hold"  # new Pods wait gated; running ones continue
    STOP = "Stop"  # also stop the running Pods once the daily or monthly limit is reached (SPEND)


BUDGET_FIELDS = ("maxHourlyCost", "daily", "monthly", "maxInstances", "onExceeded", "allowUnpriced")


@dataclass(frozen=True)
class Budget:
    """`spec.budget`: every limit optional (None: no such limit). Dollars for the first three."""

    max_hourly_cost: float | None = None
    daily: float | None = None
    monthly: float | None = None
    max_instances: int | None = None
    on_exceeded: OnExceeded = OnExceeded.HOLD
    allow_unpriced: bool = False

    def view(self) -> BudgetView:
        """The read-side value the status, the console and the metrics show."""
        return BudgetView(
            max_hourly_cost=self.max_hourly_cost,
            daily=self.daily,
            monthly=self.monthly,
            max_instances=self.max_instances,
            on_exceeded=self.on_exceeded.value,
            allow_unpriced=self.allow_unpriced,
        )


@dataclass(frozen=True)
class NodePool:
    name: str
    providers: tuple[PoolProvider, ...]
    capacity_types: tuple[Tier, ...] = (Tier.ON_DEMAND, Tier.SPOT)
    strategy: Strategy = Strategy.ORDERED
    blocklist_ttl: float = DEFAULT_BLOCKLIST_TTL
    egress: Egress = OPEN
    provisioning_timeout: float = DEFAULT_PROVISIONING_TIMEOUT  # seconds an instance may stay PROVISIONING
    budget: Budget | None = None  # None: spec.budget absent, no limit and unpriced offerings allowed
    interruption: Interruption = Interruption()  # spec.interruption (placement.interruptspec)
    wait_for_capacity: float | None = None  # spec.failover.waitForCapacity in seconds; None: wait forever
    generation: int = 0
    resource_version: str = ""


def parse_pool(obj: Mapping[str, Any]) -> NodePool:
    """A NodePool dict (as the API returns it) to a NodePool; PoolError names the first problem."""
    meta = obj.get("metadata") or {}
    name = str(meta.get("name") or "")
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        raise PoolError("spec: required; give at least spec.providers")
    blocklist_ttl, wait = _failover(spec.get("failover"))
    return NodePool(
        name=name,
        providers=_providers(spec.get("providers")),
        capacity_types=_capacity_types(spec.get("capacityTypes")),
        strategy=_strategy(spec.get("strategy")),
        blocklist_ttl=blocklist_ttl,
        egress=_egress(spec.get("egress")),
        provisioning_timeout=_provisioning_timeout(spec.get("provisioningTimeout")),
        budget=parse_budget(spec.get("budget")),
        interruption=interruption(spec.get("interruption")),
        wait_for_capacity=wait,
        generation=int(meta.get("generation") or 0),
        resource_version=str(meta.get("resourceVersion") or ""),
    )


def _providers(raw: Any) -> tuple[PoolProvider, ...]:
    if not isinstance(raw, list) or not raw:
        raise PoolError("spec.providers: list at least one provider, e.g. [{name: gpu-a}]")
    if len(raw) > MAX_PROVIDERS:
        raise PoolError(f"spec.providers: at most {MAX_PROVIDERS} providers (got {len(raw)})")
    result: list[PoolProvider] = []
    for index, entry in enumerate(raw):
        where = f"spec.providers[{index}]"
        if not isinstance(entry, Mapping):
            raise PoolError(f"{where}: must be an object such as {{name: gpu-a, regions: [us]}}")
        unknown = set(entry) - {"name", "regions"}
        if unknown:
            raise PoolError(f"{where}: unknown fields {sorted(unknown)}; allowed: name, regions")
        name = entry.get("name")
        if not isinstance(name, str) or not _NAME.match(name):
            raise PoolError(f"{where}.name: {name!r} is not a provider alias (lower-case letters, digits, '-')")
        if any(p.name == name for p in result):
            raise PoolError(f"{where}.name: {name!r} is listed twice; list each provider once")
        regions = entry.get("regions", [])
        if not isinstance(regions, list) or not all(isinstance(r, str) and r.strip() for r in regions):
            raise PoolError(f"{where}.regions: must be a list of region names or groups such as [us, eu-west-1]")
        if len(regions) > MAX_REGIONS:
            raise PoolError(f"{where}.regions: at most {MAX_REGIONS} entries")
        result.append(PoolProvider(name, tuple(r.strip() for r in regions)))
    return tuple(result)


def _capacity_types(raw: Any) -> tuple[Tier, ...]:
    if raw is None:
        return (Tier.ON_DEMAND, Tier.SPOT)
    if not isinstance(raw, list) or not raw:
        raise PoolError("spec.capacityTypes: list Spot and/or OnDemand in the order to try them")
    tiers: list[Tier] = []
    for index, value in enumerate(raw):
        tier = Tier.parse(value) if isinstance(value, str) else None
        if tier is None or tier.value != value:  # the CRD spells a tier exactly, as its schema's enum does
            hint = f"; did you mean {tier.value}?" if tier is not None else ""
            raise PoolError(f"spec.capacityTypes[{index}]: {value!r} is not one of Spot, OnDemand (case matters){hint}")
        if tier in tiers:
            raise PoolError(f"spec.capacityTypes[{index}]: {value!r} is listed twice")
        tiers.append(tier)
    return tuple(tiers)


def _strategy(raw: Any) -> Strategy:
    if raw is None:
        return Strategy.ORDERED
    return _enum_field(raw, Strategy, "spec.strategy")


def _failover(raw: Any) -> tuple[float, float | None]:
    """`spec.failover`, read once: its blocklistTTL and its waitForCapacity (None: wait forever)."""
    if raw is None:
        return DEFAULT_BLOCKLIST_TTL, None
    raw = fields_of(raw, "spec.failover", FAILOVER_FIELDS, "{blocklistTTL: 5m}")
    ttl = raw.get("blocklistTTL")
    if ttl is not None:
        ttl = bounded_duration(ttl, "spec.failover.blocklistTTL", MIN_TTL, MAX_TTL)
    return DEFAULT_BLOCKLIST_TTL if ttl is None else ttl, wait_for_capacity(raw.get("waitForCapacity"))


def _egress(raw: Any) -> Egress:
    if raw is None:
        return OPEN
    if not isinstance(raw, Mapping):
        raise PoolError("spec.egress: must be an object such as {mode: Allowlist, targets: [10.0.0.0/8, pypi.org]}")
    unknown = set(raw) - {"mode", "targets"}
    if unknown:
        raise PoolError(f"spec.egress: unknown fields {sorted(unknown)}; allowed: mode, targets")
    mode = _enum_field(raw.get("mode", EgressMode.OPEN.value), EgressMode, "spec.egress.mode")
    targets = raw.get("targets")
    if mode is not EgressMode.ALLOWLIST:
        if targets:
            raise PoolError(f"spec.egress.targets: only with mode Allowlist (mode is {mode.value}); remove them")
        return Egress(mode)
    if not isinstance(targets, list) or not all(isinstance(t, str) for t in targets):
        raise PoolError("spec.egress.targets: Allowlist needs a list of CIDRs or domains, e.g. [10.0.0.0/8, pypi.org]")
    try:
        return egress_policy.allowlist(targets)
    except ValueError as exc:
        where = "spec.egress." if str(exc).startswith("targets[") else "spec.egress.targets: "
        raise PoolError(f"{where}{exc}") from None


def _provisioning_timeout(raw: Any) -> float:
    if raw is None:
        return DEFAULT_PROVISIONING_TIMEOUT
    return bounded_duration(raw, "spec.provisioningTimeout", MIN_PROVISIONING_TIMEOUT, MAX_PROVISIONING_TIMEOUT)


def parse_budget(raw: Any) -> Budget | None:
    """`spec.budget` to a Budget (None when absent); PoolError names the field and the fix."""
    if raw is None:
        return None
    raw = fields_of(raw, "spec.budget", BUDGET_FIELDS, "{maxHourlyCost: 20, daily: 300}")
    count = raw.get("maxInstances")
    if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 0):
        raise PoolError(f"spec.budget.maxInstances: {count!r} is not a whole number >= 0, e.g. 10")
    allow = raw.get("allowUnpriced", False)
    if not isinstance(allow, bool):
        raise PoolError(f"spec.budget.allowUnpriced: {allow!r} is not true or false")
    return Budget(
        max_hourly_cost=_dollars(raw, "maxHourlyCost", "20 (dollars an hour)"),
        daily=_dollars(raw, "daily", "300 (dollars per UTC day)"),
        monthly=_dollars(raw, "monthly", "5000 (dollars per UTC month)"),
        max_instances=count,
        on_exceeded=_on_exceeded(raw.get("onExceeded")),
        allow_unpriced=allow,
    )


def _dollars(raw: Mapping[str, Any], key: str, example: str) -> float | None:
    value = raw.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise PoolError(f"spec.budget.{key}: {value!r} is not a number; write dollars such as {example}")
    if value < 0:
        raise PoolError(f"spec.budget.{key}: {value!r} is negative; use 0 or more, e.g. {example}")
    return float(value)


def _on_exceeded(raw: Any) -> OnExceeded:
    if raw is None:
        return OnExceeded.HOLD
    return _enum_field(raw, OnExceeded, "spec.budget.onExceeded")


_Choice = TypeVar("_Choice", Strategy, EgressMode, OnExceeded)


def _enum_field(raw: Any, choices: type[_Choice], field: str) -> _Choice:
    """`raw` as one of `choices`, spelled exactly as the CRD's enum spells it; a PoolError names
    the field, the allowed values and, for a value off only in case, the one meant."""
    found = next((c for c in choices if c.value == raw), None)
    if found is not None:
        return found
    text = raw.casefold() if isinstance(raw, str) else None
    folded = next((c for c in choices if c.value.casefold() == text), None)
    hint = f"; did you mean {folded.value}?" if folded is not None else ""
    allowed = ", ".join(c.value for c in choices)
    raise PoolError(f"{field}: {raw!r} is not one of {allowed} (case matters){hint}")
