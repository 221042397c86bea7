"""The local provider's options and the node capacity it declares.

Called by `LocalProvider.__init__` (parsing only, no I/O) and by `capabilities()`
(which reads /proc/meminfo once). Rejects unknown keys so typos surface at start-up.
Tests: tests/providers/local/test_local.py.
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
KNOWN_KEYS = frozenset({"state_dir", "grace_period", "poll_interval", "capacity", "usage_interval"})


@dataclass(frozen=True)
class LocalOptions:
    state_dir: Path  # absolute; instances live in <state_dir>/local/<cluster>.<alias>/<claim>/
    grace_period: float  # seconds between SIGTERM and SIGKILL
    poll_interval: float
    capacity: Mapping[str, str] | None  # None: measure this machine
    usage_interval: float = DEFAULT_SAMPLE_INTERVAL  # seconds between two /proc samples of a container


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
    )


def _memory_total() -> str | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemTotal:"):
                    return f"{int(line.split()[1])}Ki"
    except (OSError, ValueError, IndexError):
        return None
    return None


def measure_capacity(override: Mapping[str, str] | None) -> dict[str, str]:
    """This machine's cpu, memory and a pod count, with `override` on top."""
    capacity = {"cpu": str(os.cpu_count() or 1), "pods": "110"}
    memory = _memory_total()
    if memory:
        capacity["memory"] = memory
    capacity.update(override or {})
    return capacity
