"""The instance-type catalog (`catalog.csv`, shipped with the package) and the choice of
instance types for a Pod.

Called by `AwsProvider` for offerings and for provision. Pure once loaded; prices are a
snapshot of AWS's public on-demand list (see docs/providers/aws.md), never fetched here.
Tests: tests/providers/aws/test_aws_boot.py.
"""

from __future__ import annotations

import csv
import functools
import io
from dataclasses import dataclass
from importlib import resources

CATALOG_FILE = "catalog.csv"
_ALIASES = {"A100-40GB": "A100", "A10": "A10G", "L40": "L40S"}


@dataclass(frozen=True)
class CatalogEntry:
    instance_type: str
    family: str
    accelerator: str | None  # canonical upper-case name (T4, A10G, L4, L40S, A100, A100-80GB, H100); None: CPU
    gpu_count: int
    gpu_memory_gib: int
    vcpu: int
    memory_gib: int
    region: str
    on_demand_price: float  # USD per hour


def canonical_accelerator(name: str | None) -> str | None:
    """The catalog's spelling of an accelerator label value (`nvidia-a10g` -> `A10G`)."""
    if not name:
        return None
    upper = name.strip().upper().removeprefix("NVIDIA-").removeprefix("NVIDIA ")
    return _ALIASES.get(upper, upper)


def parse_catalog(text: str) -> tuple[CatalogEntry, ...]:
    """Entries from CSV text; ValueError names the bad line."""
    entries = []
    for number, row in enumerate(csv.DictReader(io.StringIO(text)), start=2):
        try:
            entries.append(
                CatalogEntry(
                    instance_type=row["instance_type"],
                    family=row["family"],
                    accelerator=canonical_accelerator(row["accelerator"]),
                    gpu_count=int(row["gpu_count"]),
                    gpu_memory_gib=int(row["gpu_memory_gib"]),
                    vcpu=int(row["vcpu"]),
                    memory_gib=int(row["memory_gib"]),
                    region=row["region"],
                    on_demand_price=float(row["on_demand_usd_per_hour"]),
                )
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{CATALOG_FILE} line {number}: {exc}") from exc
    return tuple(entries)


@functools.cache
def load_catalog() -> tuple[CatalogEntry, ...]:
    """The shipped catalog, read once per process."""
    return parse_catalog(resources.files("providers.aws").joinpath(CATALOG_FILE).read_text(encoding="utf-8"))


def candidates(
    catalog: tuple[CatalogEntry, ...],
    *,
    accelerator: str | None,
    gpu_count: int,
    region: str,
    cpu: float | None = None,
    memory_bytes: int | None = None,
) -> list[CatalogEntry]:
    """The instance types that serve this request in `region`, cheapest (the primary)
    first, then the interchangeable alternates: same accelerator and GPU count, enough
    vCPU and memory for the Pod's requests."""
    wanted = canonical_accelerator(accelerator)
    count = max(gpu_count, 1) if wanted else 0
    memory_gib = (memory_bytes or 0) / 2**30
    fitting = [
        entry
        for entry in catalog
        if entry.region == region
        and entry.accelerator == wanted
        and entry.gpu_count == count
        and entry.vcpu >= (cpu or 0)
        and entry.memory_gib >= memory_gib
    ]
    return sorted(fitting, key=lambda entry: (entry.on_demand_price, entry.instance_type))


def regions(catalog: tuple[CatalogEntry, ...]) -> list[str]:
    """Every region the catalog prices, in first-seen order."""
    return list(dict.fromkeys(entry.region for entry in catalog))


def primaries(catalog: tuple[CatalogEntry, ...], region: str) -> list[CatalogEntry]:
    """One entry per (accelerator, GPU count) in `region`: the cheapest, which provision tries first."""
    best: dict[tuple[str | None, int], CatalogEntry] = {}
    for entry in catalog:
        if entry.region != region:
            continue
        key = (entry.accelerator, entry.gpu_count)
        if key not in best or entry.on_demand_price < best[key].on_demand_price:
            best[key] = entry
    return list(best.values())
