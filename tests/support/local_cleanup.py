"""Cleanup for local-provider tests: no supervisor or workload outlives its test."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

from providers.local import proc


def kill_leftovers(state_dir: Path) -> None:
    """SIGKILL every supervisor and workload group a test left behind, by pgid."""
    local = state_dir / "local"
    for records in [*local.glob("*"), *local.glob("*.*/*")]:  # the layout before owners, and per owner
        for name, key in (("launch.json", "supervisor"), ("run.json", "workload")):
            try:
                identity = proc.ProcessIdentity.from_json(json.loads((records / name).read_text()).get(key))
            except (OSError, ValueError):
                continue
            if identity is not None:
                proc.signal_group(identity, signal.SIGKILL)
                if proc.is_alive(identity):
                    os.kill(identity.pid, signal.SIGKILL)
