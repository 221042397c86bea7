"""The fake cloud's state file: a JSON snapshot written on every change, read at start,
and the snapshot's form (`encode_snapshot`, `decode_snapshot`).

Used by the HTTP service when it is given `--state`, so instances outlive the service.
Writes atomically (a temporary file renamed over the old one); never holds secrets,
because the cloud's snapshot has none.
Tests: tests/providers/fake/test_fake_cloud.py.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from providers.fake.faults import Fault
from providers.fake.records import InstanceRecord

# Version 2 added owners, runs and retention to records (and hide faults). A version 1
# file still loads: its records have no owner, so no provider ever sees them again.
# Version 3 added each record's containers and volumes; an older record loads as one
# container rebuilt from its own facts.
STATE_VERSION = 3
READABLE_VERSIONS = (1, 2, 3)


@dataclass(frozen=True)
class Snapshot:
    counter: int
    fault_counter: int
    records: tuple[InstanceRecord, ...]
    faults: tuple[Fault, ...]
    notices: Mapping[str, Any]  # `NoticeBook.to_dict()`: {} in a file written before interrupts


def encode_snapshot(
    *,
    counter: int,
    fault_counter: int,
    records: Iterable[InstanceRecord],
    faults: Iterable[Fault],
    notices: Mapping[str, Any],
) -> dict[str, Any]:
    return {
        "version": STATE_VERSION,
        "counter": counter,
        "fault_counter": fault_counter,
        "instances": [r.to_dict() for r in records],
        "faults": [f.to_dict() for f in faults],
        "notices": dict(notices),
    }


def decode_snapshot(state: Mapping[str, Any]) -> Snapshot:
    """The snapshot in `state`; ValueError if it is not one."""
    if state.get("version") not in READABLE_VERSIONS:
        raise ValueError(f"fake state: unknown version {state.get('version')!r}")
    try:
        return Snapshot(
            counter=int(state.get("counter", 0)),
            fault_counter=int(state.get("fault_counter", 0)),
            records=tuple(InstanceRecord.from_dict(r) for r in state.get("instances", [])),
            faults=tuple(Fault.from_dict(f) for f in state.get("faults", [])),
            notices=dict(state.get("notices") or {}),
        )
    except (TypeError, ValueError, KeyError) as exc:
        raise ValueError(f"fake state: malformed: {exc}") from exc


def read_state(path: str | Path) -> dict[str, Any] | None:
    """The saved snapshot, or None if there is no file yet. ValueError if it is unreadable."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ValueError(f"fake state file {str(path)!r} cannot be read: {exc}") from exc
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"fake state file {str(path)!r} is not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ValueError(f"fake state file {str(path)!r} does not hold a snapshot")
    return data


def write_state(path: str | Path, snapshot: dict[str, Any]) -> None:
    """Replace the file with `snapshot` in one rename, so a crash leaves old or new, never half."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(snapshot, handle, indent=1, sort_keys=True)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
