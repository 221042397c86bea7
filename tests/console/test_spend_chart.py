"""The spend charts' geometry (console.spendchart): bars stacked to each bucket's total on a
dollar axis whose top is a round figure, at most 30 bars and 32 legend entries, and a text table
that says the same as the bars."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest

from console import spendchart

START = datetime(2026, 12, 5, tzinfo=UTC)


def starts(count: int, unit: timedelta = timedelta(hours=1)) -> list[datetime]:
    return [START + unit * i for i in range(count)]


def test_bars_stack_to_the_bucket_totals_on_a_dollar_axis() -> None:
    chart = spendchart.stacked("t", "hour", starts(3), {"a": [1.0, 0.0, 3.0], "b": [2.0, 4.0, 0.5]})
    assert chart.top == 5.0 and chart.ticks == (0.0, 1.25, 2.5, 3.75, 5.0)
    assert [name for name, _ in chart.legend] == ["b", "a"]  # largest total first
    plot_h = spendchart.HEIGHT - spendchart.TOP - spendchart.BOTTOM
    base = spendchart.TOP + plot_h
    for index, total in enumerate([3.0, 4.0, 3.5]):
        column = sorted((b for b in chart.bars if b.start == START + timedelta(hours=index)), key=lambda b: -b.y)
        assert sum(b.height for b in column) == pytest.approx(total / 5.0 * plot_h)
        assert column[0].y + column[0].height == pytest.approx(base)  # the first part sits on the axis
        for lower, upper in zip(column, column[1:], strict=False):
            assert upper.y + upper.height == pytest.approx(lower.y)  # each part on the one below
    assert not any(b.dollars == 0 for b in chart.bars)  # a zero part draws nothing
    xs = sorted({round(b.x, 2) for b in chart.bars})
    assert len(xs) == 3 and xs[0] > spendchart.LEFT and xs[-1] + chart.bars[0].width < spendchart.WIDTH
    assert [row.total for row in chart.rows] == ["$3.00", "$4.00", "$3.50"]
    assert chart.rows[1].parts == (("b", "$4.00"),) and chart.rows[0].parts_text == "b $2.00, a $1.00"


@pytest.mark.parametrize(
    ("value", "top"), [(0.0, 1.0), (0.004, 0.005), (3.2, 5.0), (19.2, 20.0), (21.0, 25.0), (999.0, 1000.0)]
)
def test_the_axis_top_is_a_round_figure_at_or_above_the_highest_bar(value: float, top: float) -> None:
    assert spendchart.nice_top(value) == pytest.approx(top)


def test_at_most_24_hourly_bars_the_newest() -> None:
    chart = spendchart.stacked("t", "hour", starts(40), {"a": [float(i) for i in range(40)]})
    assert len(chart.starts) == 24 and chart.starts[-1] == START + timedelta(hours=39)
    assert [bar.dollars for bar in chart.bars] == [float(i) for i in range(16, 40)]


def test_at_most_30_bars_the_newest_and_32_series_the_rest_as_other() -> None:
    series = {f"pool-{i:02d}": [float(i + 1)] * 40 for i in range(40)}
    chart = spendchart.stacked("t", "day", starts(40, timedelta(days=1)), series)
    assert len(chart.starts) == 30 and chart.starts[0] == START + timedelta(days=10)
    assert len(chart.legend) == 32 and chart.legend[-1] == ("other", spendchart.OTHER_COLOUR)
    assert chart.legend[0][0] == "pool-39"
    assert len({b.start for b in chart.bars}) == 30 and len(chart.bars) == 30 * 32
    other = [b.dollars for b in chart.bars if b.series == "other"]
    assert other == [sum(range(1, 10))] * 30  # pools 00..08 (1..9 dollars) folded
    assert len({paint for _, paint in chart.legend}) == 32


def test_the_svg_has_one_rect_per_bar_dollar_ticks_axis_labels_and_escapes_names() -> None:
    chart = spendchart.stacked("Spend <per> pool", "hour", starts(24), {"<b>": [1.0] * 24, "a&b": [0.5] * 24})
    svg = str(chart.svg())
    assert svg.startswith("<svg") and svg.count("<rect ") == 48
    assert "<b>" not in svg and "&lt;b&gt;" in svg and "a&amp;b" in svg
    assert re.findall(r'class="tick"[^>]*>([^<]+)<', svg) == ["$0.00", "$0.50", "$1.00", "$1.50", "$2.00"]
    assert ">dollars</text>" in svg and ">hour (UTC)</text>" in svg
    assert len(re.findall(r'class="when"', svg)) <= 8


def test_an_empty_chart_says_so_and_has_no_bars() -> None:
    chart = spendchart.stacked("t", "day", [], {})
    assert chart.empty and chart.rows == () and "no spend in this period" in str(chart.svg())
