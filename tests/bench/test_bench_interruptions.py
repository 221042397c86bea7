"""The smoke run of bench/interruptions.py: 12 spot Pods of a Deployment, 4 interrupted at once,
on a real devcluster, a real `manage.py runvnode` (vnode, placement, the webhook) and the fake
cloud's service. Checks what the run must end with (every interrupted Pod replaced once, off the
interrupted offering, nothing duplicated, leaked or wrongly stopped), never how fast: the figures
are the bench's to print (docs/benchmarks.md)."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.support.fixtures import ROOT

PODS, INTERRUPTED = 12, 4


def bench(*flags: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, str(ROOT / "bench/interruptions.py"), "--pods", str(PODS)]
    command += ["--interrupt", str(INTERRUPTED), "--timeout", "120", "--settle", "2", *flags]
    return subprocess.run(command, capture_output=True, text=True, timeout=600)


def test_four_of_twelve_spot_pods_interrupted_are_replaced_elsewhere_and_nothing_else_moves() -> None:
    answer = bench("--checkpoint", "1")
    out = answer.stdout
    assert answer.returncode == 0, out + answer.stderr[-5000:]
    assert f"placed on: {{('Spot', 'us-east-1'): {PODS}}}" in out
    assert f"interrupted {INTERRUPTED} instances at once (tier Spot, notice 120s)" in out
    figures = re.search(rf"notice -> replacement Running \({INTERRUPTED} Pods\): p50 ([\d.]+)s, p99 ([\d.]+)s", out)
    assert figures is not None, out
    assert 0 < float(figures[1]) <= float(figures[2])  # an order, not a timing
    for step in ("DisruptionTarget", "Failed", "deleted", "replacement created", "replacement placed"):
        assert re.search(rf"  notice -> {step}: p50 [\d.]+s", out), step
    assert "live instances of one claim at most 1, " in out
    assert f"{INTERRUPTED} Pods created for {INTERRUPTED} interrupted" in out
    assert "leaks: 0 live instances of no Running Pod, 0 Running Pods without one; " in out
    assert f"interrupted instances terminated {INTERRUPTED}/{INTERRUPTED} (0 at the deadline)" in out
    assert f"notices acknowledged {INTERRUPTED}/{INTERRUPTED}" in out
    healthy = PODS - INTERRUPTED
    assert f"healthy Pods: {healthy}/{healthy} Running throughout with their uid; 0 of their instances stopped" in out
    assert f"the notice recorded: {INTERRUPTED}/{INTERRUPTED}" in out
    assert f"replacements placed on: Spot us-west-2: {INTERRUPTED}" in out  # us-east-1 Spot is blocked
    assert out.rstrip().endswith("all checks held: 0 duplicates, 0 leaks, 0 healthy Pods failed")


def test_an_impossible_ask_fails_with_a_clear_message() -> None:
    answer = bench("--interrupt", str(PODS + 1))
    assert answer.returncode != 0
    assert "--interrupt must be between 1 and --pods" in answer.stderr
