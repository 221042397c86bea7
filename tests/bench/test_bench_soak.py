"""The smoke run of bench/soak.py --quick: a real devcluster, a real `manage.py runvnode` (local
provider, client-certificate kubelet listener), every surface driven past its (small) cap by
clients in child processes. Checks what the run must show whatever the caps enforced so far:
every surface's figures printed, the anonymous per-client cap and the metrics head timeout held,
the debug output budget said by Events; never how fast nor how many MiB (the bench's to print,
docs/benchmarks.md)."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.support.fixtures import ROOT

SURFACES = (
    "kubelet connections, anonymous",
    "kubelet connections, authenticated",
    "exec sessions (SPDY)",
    "port-forward connections (3 sessions)",
    "metrics, half-sent GET /metrics",
    "debug containers",
    "console requests (TLS)",
    "followed logs",
)
FIGURES = r"threads (\d+), RSS (\d+) MiB, fds (\d+)"


def bench(*flags: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, str(ROOT / "bench/soak.py"), *flags]
    return subprocess.run(command, capture_output=True, text=True, timeout=900)


def section(out: str, surface: str) -> str:
    start = out.index(f"== {surface} (caps: ")
    end = out.find("\n== ", start + 1)
    return out[start : end if end > 0 else len(out)]


def clients(text: str) -> tuple[int, int, int]:
    found = re.search(r"clients: open=(\d+) refused=(\d+); server_closed=(\d+)", text)
    assert found is not None, text
    return int(found[1]), int(found[2]), int(found[3])


def test_soak_quick_drives_every_surface_past_its_cap_and_prints_idle_cap_and_after_close() -> None:
    answer = bench("--quick", "--seconds", "1", "--settle", "20")
    out = answer.stdout
    assert answer.returncode == 0, out + answer.stderr[-5000:]
    assert 'caps (quick): NEBULA_LISTENER_LIMITS={"per_client": 16, ' in out
    for surface in SURFACES:
        text = section(out, surface)
        for moment in ("idle before:  ", "at the cap:   ", "after close:  "):
            assert re.search(moment + FIGURES, text), (surface, moment, text)
        assert re.search(r"after close within 10% of idle: (yes|no \([a-z, ]+\))", text), text
    # Anonymous connections from one address: the tight per-client cap (16), the rest refused at
    # accept; those kept are closed by the head timeout, none left to the client to close.
    opened, refused, closed = clients(section(out, "kubelet connections, anonymous"))
    assert opened <= 16 and opened + refused == 24 and closed == opened
    # 100 half-sent GET /metrics: at most the per-client cap held, every one held closed by the server.
    opened, refused, closed = clients(section(out, "metrics, half-sent GET /metrics"))
    assert opened <= 16 and opened + refused == 100 and closed == opened
    opened, refused, _ = clients(section(out, "exec sessions (SPDY)"))
    assert opened + refused == 12  # 1.5 x sessions_total 8: each one either echoed or was refused
    forwarded = re.search(r"(\d+) forwarded connections echoing in \d+ sessions", out)
    assert forwarded is not None and 0 < int(forwarded[1]) <= 27, out
    opened, refused, _ = clients(section(out, "followed logs"))
    assert opened + refused == 18
    assert re.search(r"32 whole requests at once: \{[^}]*'200': \d+", out), out
    dropped = re.search(r"3 x 2 MiB of output ended; (\d+) Events of output dropped for the budget", out)
    assert dropped is not None and int(dropped[1]) >= 1, out  # 6 MiB of output past a 4 MiB budget
    assert "after close within 10% of idle: " in out.splitlines()[-1]


def test_a_negative_hold_fails_with_a_clear_message() -> None:
    answer = bench("--seconds", "-1")
    assert answer.returncode != 0
    assert "--seconds and --settle must not be negative" in answer.stderr
