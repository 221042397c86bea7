"""Which offering takes a new fake instance, or the refusal that applies: the shape,
the asked tier and region, standing refuse faults and each offering's capacity.

Called by `FakeCloud` under its lock for `provision` and `offerings`. Pure: it reads the
scenario, the faults and the records and returns a decision; the cloud spends a counted
fault and raises the error.

Invariant: a fault refusing as `invalid` or `unsupported` (an error that is not `Refused`)
says the shape cannot be served as asked, not that it is sold out: `offerings` still shows
the offering available, and only `provision` is refused. Tested in
tests/providers/fake/test_fake_cloud.py::test_an_invalid_or_unsupported_refusal_does_not_sell_the_offering_out.
Tests: tests/providers/fake/test_fake_cloud.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from providers import base, errors
from providers.fake.faults import REFUSE_REASONS, Fault
from providers.fake.records import InstanceRecord
from providers.fake.scenario import OfferingSpec, Scenario


@dataclass(frozen=True)
class Refusal:
    """The answer to a provision that cannot be placed; `fault` is the counted fault it
    spends (None: the scenario itself refuses)."""

    error: errors.ProviderError
    fault: Fault | None = None


def choose_offering(
    pod: base.PodSpec,
    request: base.ProvisionRequest,
    scenario: Scenario,
    faults: Mapping[str, Fault],
    records: Iterable[InstanceRecord],
) -> OfferingSpec | Refusal:
    """The first offering of the Pod's shape, in the asked tier and region, with room."""
    if pod.accelerator is None and pod.gpu_count > 0:
        return Refusal(errors.InvalidRequest("fake: a GPU count needs the nebula.io/accelerator label"))
    shape = [
        o
        for o in scenario.offerings
        if o.accelerator == pod.accelerator and (pod.gpu_count == 0 or o.gpu_count in (0, pod.gpu_count))
    ]
    wanted = f"{pod.accelerator or 'cpu'} x{pod.gpu_count}"
    if not shape:
        return Refusal(errors.InvalidRequest(f"fake: no offering has {wanted}"))
    tier, region = request.capacity_type, request.region
    placed = [o for o in shape if (tier is None or o.tier is tier) and (region is None or o.region == region)]
    if not placed:
        where = f"{tier.value if tier else 'any tier'} in {region or 'any region'}"
        return Refusal(errors.NoCapacity(f"fake: {wanted} is not offered {where}"))
    held = list(records)
    first: Refusal | None = None
    for spec in placed:
        problem = _obstacle(spec, faults.values(), held)
        if problem is None:
            return spec
        first = first or _refusal(problem, spec)
    assert first is not None
    return first


def admits(spec: OfferingSpec, faults: Mapping[str, Fault], records: Iterable[InstanceRecord]) -> Fault | str | None:
    """Why `spec` is sold out now (a `Refused` fault, or "full"), else None: what `offerings`
    reports. A fault refusing the shape as invalid or unsupported does not sell it out."""
    return _obstacle(spec, [f for f in faults.values() if _sells_out(f)], records)


def _obstacle(spec: OfferingSpec, faults: Iterable[Fault], records: Iterable[InstanceRecord]) -> Fault | str | None:
    """Why `spec` cannot take one more instance now (the first fault refusing it, or "full"), else None."""
    fault = next((f for f in faults if f.refuses(spec)), None)
    if fault is not None:
        return fault
    if spec.capacity is not None and sum(r.holds(spec) for r in records) >= spec.capacity:
        return "full"
    return None


def _sells_out(fault: Fault) -> bool:
    return fault.reason is not None and issubclass(REFUSE_REASONS[fault.reason], errors.Refused)


def _refusal(problem: Fault | str, spec: OfferingSpec) -> Refusal:
    if isinstance(problem, Fault):
        return Refusal(problem.error(spec), problem if problem.remaining is not None else None)
    shape = f"{spec.accelerator or 'cpu'} x{spec.gpu_count} {spec.tier.value} in {spec.region}"
    return Refusal(errors.NoCapacity(f"fake: no capacity for {shape} (all {spec.capacity} in use)"))
