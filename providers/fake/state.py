"""The fake cloud's state file: a JSON snapshot written on every change, read at start.

Used by the HTTP service when it is given `--state`, so instances outlive the service.
Writes atomically (a temporary file renamed over the old one); never holds secrets,
because the cloud's snapshot has none.
Tests: tests/providers/fake/test_fake_cloud.py.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


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
