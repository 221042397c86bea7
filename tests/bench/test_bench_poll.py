"""The smoke run of bench/poll.py: a few hundred tracked Pods on the in-process fake provider,
quiet ticks (no API call: the bench's stand-in raises on any). Checks the run ends with every
figure printed, the provider's list apart from Nebula's own part, never how fast: the figures are
the bench's to print (docs/benchmarks.md)."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.support.fixtures import ROOT


def bench(*flags: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, str(ROOT / "bench/poll.py"), *flags]
    return subprocess.run(command, capture_output=True, text=True, timeout=600)


def test_a_quiet_tick_prints_the_list_and_nebulas_own_part_apart_and_rss_per_pod() -> None:
    answer = bench("--pods", "300", "--ticks", "3", "--profile")
    out = answer.stdout
    assert answer.returncode == 0, out + answer.stderr[-5000:]
    assert "tracked Pods: 300, ticks: 3" in out
    tick = re.search(r"quiet poll tick: p50 ([\d.]+) ms, max ([\d.]+) ms", out)
    listed = re.search(r"  of which provider\.list\(\): p50 ([\d.]+) ms, max ([\d.]+) ms", out)
    own = re.search(
        r"  of which Nebula's own part: p50 ([\d.]+) ms, max ([\d.]+) ms \(([\d.]+) us per tracked Pod\)", out
    )
    assert tick is not None and listed is not None and own is not None, out
    for figures in (tick, listed, own):
        assert 0 < float(figures[1]) <= float(figures[2])  # an order, not a timing
    assert float(listed[1]) < float(tick[2]) and float(own[1]) < float(tick[2]), "each a part of the tick"
    assert re.search(r"RSS growth for the Pods and their tracking: -?[\d.]+ KiB per tracked Pod", out), out
    assert "poll_once" in out, "the profile names the tick"


def test_an_impossible_ask_fails_with_a_clear_message() -> None:
    answer = bench("--pods", "0")
    assert answer.returncode != 0
    assert "--pods and --ticks must be at least 1" in answer.stderr
