"""The Spend page in headless Chromium at 1,280 x 800 over a hand-built report (eight pools,
one over budget, one unpriced; 60 billing Pods): a screenshot `spend.png` goes to
$NEBULA_TEST_layout.ARTIFACTS/console/, and in the page each chart draws the bars its data asks for
inside its plot, every legend entry has its colour, and no table (the chart tables opened too)
is wider than its container or cuts a word."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from console import runtime
from tests.console import test_console_layout as layout
from tests.console.spendreports import ReportingPlacement, report

window = layout.window  # Chromium at 1,280 x 800 (a fixture)

# Per chart: its bars, whether each lies within the plot (the svg's box), and its legend swatches.
CHART_CHECK = """
return [...document.querySelectorAll("figure.spend-chart")].map(figure => {
  const svg = figure.querySelector("svg").getBoundingClientRect();
  const bars = [...figure.querySelectorAll("rect.bar")];
  const outside = bars.filter(bar => {
    const box = bar.getBoundingClientRect();
    return box.left < svg.left - 0.5 || box.right > svg.right + 0.5 || box.top < svg.top - 0.5
      || box.bottom > svg.bottom + 0.5 || box.height <= 0;
  }).length;
  const swatches = [...figure.querySelectorAll(".legend .swatch")].map(s => getComputedStyle(s).backgroundColor);
  return {unit: figure.dataset.unit, bars: bars.length, expected: parseInt(figure.dataset.bars, 10),
          outside: outside, series: new Set(bars.map(b => b.dataset.series)).size, swatches: swatches,
          width: svg.width, figure: figure.getBoundingClientRect().width};
});
"""


@pytest.fixture
def reporting() -> Iterator[ReportingPlacement]:
    placement = ReportingPlacement(report(pods=60, pools_extra=5))
    runtime.install(placement=placement)  # type: ignore[arg-type]
    yield placement
    runtime.clear()


def test_the_spend_page_draws_its_charts_in_chromium(
    reporting: ReportingPlacement, live_server: Any, window: Any
) -> None:
    base = live_server.url
    layout.log_in(window, base)
    window.get(f"{base}/spend/")
    charts = window.execute_script(CHART_CHECK)
    layout.ARTIFACTS.mkdir(parents=True, exist_ok=True)
    assert window.save_screenshot(str(layout.ARTIFACTS / "spend.png"))
    # Pools gpu-a, gpu-b and five extras have hourly and daily buckets; the unpriced pool none.
    assert [(c["unit"], c["bars"], c["series"]) for c in charts] == [
        ("hour", 24 * 7, 7),
        ("hour", 24 * 2, 2),
        ("day", 30 * 7, 7),
        ("day", 30 * 2, 2),
    ]
    for chart in charts:
        assert chart["bars"] == chart["expected"] and chart["outside"] == 0, chart
        assert len(set(chart["swatches"])) == chart["series"] == len(chart["swatches"]), chart
        assert 400 < chart["width"] <= chart["figure"], chart
    window.execute_script("document.querySelectorAll('details').forEach(d => d.open = true)")
    measured = window.execute_script(layout.LAYOUT_CHECK)
    assert measured["tables"] == 6 and measured["words"] > 300, measured
    assert measured["problems"] == [], measured["problems"]
    assert window.save_screenshot(str(layout.ARTIFACTS / "spend-tables.png"))
