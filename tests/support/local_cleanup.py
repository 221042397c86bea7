"""Cleanup for local-provider tests: no supervisor or workload outlives its test (and which
supervisors of an instance folder live)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

from providers.local import pids as proc


def kill_leftovers(state_dir: Path) -> None:
    """SIGKILL every supervisor and workload group a test left behind, by pgid."""
    local = state_dir / "local"
    # The layout before owners, per owner, and each further container's folder of an instance.
    for records in [*local.glob("*"), *local.glob("*.*/*"), *local.glob("*.*/*/containers/*")]:
        for name, key in (("launch.json", "supervisor"), ("run.json", "workload")):
            try:
                identity = proc.ProcessIdentity.from_json(json.loads((records / name).read_text()).get(key))
            except (OSError, ValueError):
                continue
            if identity is not None:
                proc.signal_group(identity, signal.SIGKILL)
                if proc.is_alive(identity):
                    os.kill(identity.pid, signal.SIGKILL)


def live_supervisors(path: Path) -> list[int]:
    """Pids of live supervisor processes of one instance folder, read from /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"providers.local.supervisor" in argv and str(path).encode() in argv:
            identity = proc.identify(int(entry.name))
            if identity is not None and proc.is_alive(identity):
                found.append(identity.pid)
    return found
