"""The GPU catalog (`catalog.csv`, shipped with the package): Nebula accelerator names to
Modal's GPU strings, with Modal's published per-GPU-hour prices (OnDemand only) and the most
GPUs of the type one sandbox may have (`max_count`: 4 for the A10G, 8 for the rest).

Called by `ModalProvider` for offerings and provision. Pure once loaded.
Tests: tests/providers/modal/test_modal_provider_options.py.
"""

from __future__ import annotations

import csv
import functools
import io
from dataclasses import dataclass
from importlib import resources

CATALOG_FILE = "catalog.csv"
_ALIASES = {"a100": "a100-40gb", "a10": "a10g", "h100!": "h100", "l40": "l40s"}


@dataclass(frozen=True)
class GpuEntry:
    accelerator: str  # Nebula's folded label value: h100, a100-80gb, ...
    modal_gpu: str  # Modal's spelling: H100! (pinned), A100-80GB, ...
    gpu_memory_gib: int
    hourly_price: float  # USD per GPU-hour
    max_count: int = 1  # the most GPUs of this type in one sandbox

    def counts(self) -> tuple[int, ...]:
        """The GPU counts offered: 1, 2, 4 and 8, up to `max_count`."""
        return tuple(n for n in (1, 2, 4, 8) if n <= self.max_count)


def canonical(name: str | None) -> str | None:
    """The catalog's spelling of an accelerator label (`nvidia-a10g` -> `a10g`), or None."""
    if not name:
        return None
    folded = name.strip().lower().removeprefix("nvidia-").removeprefix("nvidia ")
    return _ALIASES.get(folded, folded)


@functools.cache
def load_catalog() -> tuple[GpuEntry, ...]:
    """The shipped catalog, read once per process; ValueError names a bad line."""
    text = resources.files("providers.modal").joinpath(CATALOG_FILE).read_text(encoding="utf-8")
    entries = []
    for number, row in enumerate(csv.DictReader(io.StringIO(text)), start=2):
        try:
            entries.append(
                GpuEntry(
                    row["accelerator"],
                    row["modal_gpu"],
                    int(row["gpu_memory_gib"]),
                    float(row["usd_per_gpu_hour"]),
                    int(row["max_count"]),
                )
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{CATALOG_FILE} line {number}: {exc}") from exc
    return tuple(entries)


def entry_for(accelerator: str | None) -> GpuEntry | None:
    wanted = canonical(accelerator)
    return next((entry for entry in load_catalog() if entry.accelerator == wanted), None)


def gpu_string(accelerator: str | None, count: int) -> str | None:
    """Modal's `gpu` argument for the Pod (`H100!`, `A100-80GB:2`); None for a CPU Pod.
    ValueError naming the accelerator when Modal has no such GPU."""
    if not accelerator:
        return None
    entry = entry_for(accelerator)
    if entry is None:
        known = ", ".join(e.accelerator for e in load_catalog())
        raise ValueError(f"Modal offers no accelerator {accelerator!r} (known: {known})")
    count = max(count, 1)
    if count > entry.max_count:
        raise ValueError(f"Modal gives at most {entry.max_count} {entry.accelerator} GPUs to a sandbox, not {count}")
    return entry.modal_gpu if count == 1 else f"{entry.modal_gpu}:{count}"
