"""The smoke run of bench/budgets.py: a handful of gated Pods through each of its runs, on real
devclusters and the real placement. Checks what each run must end with (every Pod placed; or
exactly `--limit` placed and the rest held BudgetExceeded), never how fast: the figures are the
bench's to print (docs/benchmarks.md)."""

from __future__ import annotations

import subprocess
import sys

from tests.support.fixtures import ROOT

PODS, LIMIT = 12, 3


def bench(*runs: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, str(ROOT / "bench/budgets.py"), "--pods", str(PODS), "--limit", str(LIMIT)]
    return subprocess.run(command + ["--runs", ",".join(runs), "--timeout", "120"], capture_output=True, text=True)


def test_without_and_with_a_budget_that_cannot_bind_every_pod_is_placed() -> None:
    answer = bench("without", "with")
    assert answer.returncode == 0, answer.stdout + answer.stderr
    for run in ("without", "with"):
        assert f"[{run}] {PODS} decisions in " in answer.stdout
        assert f"[{run}] decisions by outcome: {{'placed': {PODS}}}" in answer.stdout
    assert "[with] budget: maxHourlyCost=" in answer.stdout
    assert "with budget / without: " in answer.stdout


def test_a_budget_that_binds_places_its_limit_and_holds_the_rest() -> None:
    answer = bench("binding")
    assert answer.returncode == 0, answer.stdout + answer.stderr
    assert f"{LIMIT} placed, the last decision at" in answer.stdout
    assert f"[binding] gated Pods by reason: {{'BudgetExceeded': {PODS - LIMIT}}}" in answer.stdout
