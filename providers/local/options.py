"""The local provider's options and the node capacity it declares.

Called by `LocalProvider.__init__` (parsing only, no I/O) and by `capabilities()` (which
reads /proc/meminfo and lists /proc/driver/nvidia/gpus once). Rejects unknown keys so typos
surface at start-up. The node's `nvidia.com/gpu` is the GPUs this machine has (none without
the NVIDIA driver), never an unbounded number; the `gpus` option declares more for demos.
Tests: tests/providers/local/test_local.py, tests/providers/local/test_local_gpus.py.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from providers.usage import DEFAULT_SAMPLE_INTERVAL

DEFAULT_STATE_DIR = ".nebula/state"
STATE_DIR_ENV = "NEBULA_STATE_DIR"
KNOWN_KEYS = frozenset({"state_dir", "grace_period", "poll_interval", "capacity", "usage_interval", "gpus"})
GPU_RESOURCE = "nvidia.com/gpu"
NVIDIA_GPUS = Path("/proc/driver/nvidia/gpus")  # one entry per GPU the NVIDIA driver sees


@dataclass(frozen=True)
class LocalOptions:
    """The parsed options.

    `grace_period`: seconds between SIGTERM and SIGKILL when `terminate` finds a container
    nobody stopped first (the orphan sweep); a Pod's own grace (terminationGracePeriodSeconds,
    `kubectl delete --grace-period`) reaches its containers through `stop_container`, and
    terminate after such a stop adds no grace of its own.
    `gpus`: the `nvidia.com/gpu` the node declares, and the most a Pod may ask for here;
    None counts this machine's (`/proc/driver/nvidia/gpus`, 0 without the driver). A larger
    number is for demos: the Pod runs here with whatever GPUs the machine really has.
    """

    state_dir: Path  # absolute; instances live in <state_dir>/local/<cluster>.<alias>/<claim>/
    grace_period: float  # seconds between SIGTERM and SIGKILL on terminate of an unstopped container
    poll_interval: float
    capacity: Mapping[str, str] | None  # None: measure this machine
    usage_interval: float = DEFAULT_SAMPLE_INTERVAL  # seconds between two /proc samples of a container
    gpus: int | None = None  # None: the GPUs this machine has


def _number(options: Mapping[str, Any], key: str, default: float) -> float:
    value = options.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"option {key!r} must be a number of seconds")
    try:
        number = float(value)
    except ValueError as exc:
        raise ValueError(f"option {key!r} must be a number of seconds") from exc
    if number < 0:
        raise ValueError(f"option {key!r} must not be negative")
    return number


def parse_options(options: Mapping[str, Any]) -> LocalOptions:
    """Validate `options`; ValueError names what is wrong (unknown keys, bad values)."""
    unknown = sorted(set(options) - KNOWN_KEYS)
    if unknown:
        raise ValueError(f"unknown option(s) for the local provider: {', '.join(unknown)}")
    state_dir = options.get("state_dir") or os.environ.get(STATE_DIR_ENV) or DEFAULT_STATE_DIR
    capacity = options.get("capacity")
    if capacity is not None and not isinstance(capacity, Mapping):
        raise ValueError("option 'capacity' must be a mapping such as {'cpu': '4'}")
    return LocalOptions(
        state_dir=Path(os.path.abspath(os.fspath(state_dir))),
        grace_period=_number(options, "grace_period", 10.0),
        poll_interval=_number(options, "poll_interval", 2.0),
        capacity={str(k): str(v) for k, v in capacity.items()} if capacity is not None else None,
        usage_interval=_number(options, "usage_interval", DEFAULT_SAMPLE_INTERVAL),
        gpus=_count(options, "gpus"),
    )


def _count(options: Mapping[str, Any], key: str) -> int | None:
    value = options.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | str) or not str(value).isdigit():
        raise ValueError(f"option {key!r} must be a whole number, 0 or more")
    return int(value)


def machine_gpus(root: Path | None = None) -> int:
    """The NVIDIA GPUs this machine has: the driver's entries under `root` (default
    `NVIDIA_GPUS`), 0 without the driver."""
    try:
        return sum(1 for _ in (root or NVIDIA_GPUS).iterdir())
    except OSError:
        return 0


def gpus_of(options: LocalOptions) -> int:
    """The GPUs the node declares: the `gpus` option, else this machine's."""
    return machine_gpus() if options.gpus is None else options.gpus


def _memory_total() -> str | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemTotal:"):
                    return f"{int(line.split()[1])}Ki"
    except (OSError, ValueError, IndexError):
        return None
    return None


def measure_capacity(override: Mapping[str, str] | None, *, gpus: int) -> dict[str, str]:
    """This machine's cpu, memory, a pod count and `gpus` GPUs, with `override` on top."""
    capacity = {"cpu": str(os.cpu_count() or 1), "pods": "110", GPU_RESOURCE: str(gpus)}
    memory = _memory_total()
    if memory:
        capacity["memory"] = memory
    capacity.update(override or {})
    return capacity
