"""Stacked bar charts of spend drawn server-side as inline SVG (no script, no CDN): the
geometry of the bars, the dollar axis, the legend and the text table beside each chart.

Called by `console.spendpage` with series taken from a `placement.spendview.SpendReport`.
Pure: takes values, returns values and escaped markup; reads nothing, never computes spend.
Bounded: at most `MAX_BARS[unit]` bars (24 hours, 30 days; the newest kept) and `MAX_SERIES`
series in a legend, the smallest beyond that summed as "other".
Tests: tests/console/test_spend_chart.py::test_bars_stack_to_the_bucket_totals_on_a_dollar_axis.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from placement.spend import DAYS_SHOWN, HOURS_SHOWN

MAX_BARS = {"hour": HOURS_SHOWN, "day": DAYS_SHOWN}
MAX_SERIES = 32  # in a legend, "other" included
OTHER = "other"
WIDTH, HEIGHT = 720, 260
LEFT, RIGHT, TOP, BOTTOM = 72, 12, 14, 44  # room for the dollar ticks and the time labels
TICKS = 4  # gridlines above zero
OTHER_COLOUR = "#8c959f"


@dataclass(frozen=True)
class Bar:
    """One series' part of one bucket: a rectangle in the SVG's user units."""

    series: str
    start: datetime
    dollars: float
    x: float
    y: float
    width: float
    height: float
    colour: str


@dataclass(frozen=True)
class Row:
    """One bucket in the chart's text table: its label, total and parts ((series, amount), ...)."""

    label: str
    total: str
    parts: tuple[tuple[str, str], ...]

    @property
    def parts_text(self) -> str:
        """`gpu-a $1.20, gpu-b $0.50`, or `-` for an empty bucket."""
        return ", ".join(f"{name} {amount}" for name, amount in self.parts) or "-"


@dataclass(frozen=True)
class Chart:
    title: str
    unit: str  # "hour" or "day": what one bar is
    starts: tuple[datetime, ...]
    legend: tuple[tuple[str, str], ...]  # (series, colour), largest first, "other" last
    bars: tuple[Bar, ...]
    top: float  # dollars at the top of the axis
    ticks: tuple[float, ...]
    rows: tuple[Row, ...]

    @property
    def empty(self) -> bool:
        return not self.bars

    def svg(self) -> SafeString:
        """The chart as one <svg> element, its title and description for screen readers."""
        return render_svg(self)


def colour(index: int) -> str:
    """Well-spread hues by the golden angle: the n-th series always gets the same colour."""
    return f"hsl({(index * 137.508 + 210) % 360:.0f}, 62%, 44%)"


def nice_top(value: float) -> float:
    """The axis top: the smallest 1, 2, 2.5 or 5 x 10^k at or above `value` (1 for nothing)."""
    if value <= 0 or not math.isfinite(value):
        return 1.0
    scale: float = 10.0 ** math.floor(math.log10(value))
    for step in (1.0, 2.0, 2.5, 5.0, 10.0):
        if value <= step * scale * (1 + 1e-9):
            return step * scale
    return 10 * scale


def dollars(value: float) -> str:
    """An axis or table amount: cents below $1,000, whole dollars above."""
    return f"${value:,.2f}" if value < 1000 else f"${value:,.0f}"


def bucket_label(start: datetime, unit: str) -> str:
    return start.strftime("%H:%M") if unit == "hour" else start.strftime("%m-%d")


def fold(series: Mapping[str, Sequence[float]], limit: int = MAX_SERIES) -> dict[str, list[float]]:
    """At most `limit` series, largest total first; beyond that the smallest summed as "other"."""
    ranked = sorted(series.items(), key=lambda item: (-sum(item[1]), item[0]))
    if len(ranked) <= limit:
        return {name: list(values) for name, values in ranked}
    kept = {name: list(values) for name, values in ranked[: limit - 1]}
    rest = [values for _, values in ranked[limit - 1 :]]
    kept[OTHER] = [sum(column) for column in zip(*rest, strict=True)]
    return kept


def stacked(title: str, unit: str, starts: Sequence[datetime], series: Mapping[str, Sequence[float]]) -> Chart:
    """The chart of `series` (each one value per start, oldest first), the newest `MAX_BARS` kept."""
    keep = len(starts) - min(len(starts), MAX_BARS[unit])
    starts = tuple(starts[keep:])
    folded = fold({name: list(values[keep:]) for name, values in series.items() if sum(values[keep:]) > 0})
    legend = tuple((name, OTHER_COLOUR if name == OTHER else colour(i)) for i, name in enumerate(folded))
    totals = [sum(values[i] for values in folded.values()) for i in range(len(starts))]
    top = nice_top(max(totals, default=0.0))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    slot = plot_w / max(1, len(starts))
    width = slot * 0.8
    bars = []
    for index, start in enumerate(starts):
        base = 0.0
        for name, paint in legend:
            value = folded[name][index]
            if value <= 0:
                continue
            height = value / top * plot_h
            y = TOP + plot_h - (base + value) / top * plot_h
            bars.append(Bar(name, start, value, LEFT + index * slot + (slot - width) / 2, y, width, height, paint))
            base += value
    rows = tuple(
        Row(
            bucket_label(start, unit),
            dollars(totals[i]),
            tuple((name, dollars(folded[name][i])) for name, _ in legend if folded[name][i] > 0),
        )
        for i, start in enumerate(starts)
    )
    ticks = tuple(top * step / TICKS for step in range(TICKS + 1))
    return Chart(title, unit, starts, legend, tuple(bars), top, ticks, rows)


def render_svg(chart: Chart) -> SafeString:
    plot_h = HEIGHT - TOP - BOTTOM
    grid = format_html_join(
        "",
        '<line class="grid" x1="{}" x2="{}" y1="{}" y2="{}"/>'
        '<text class="tick" x="{}" y="{}" text-anchor="end" dominant-baseline="middle">{}</text>',
        (
            (LEFT, WIDTH - RIGHT, f"{y:.1f}", f"{y:.1f}", LEFT - 6, f"{y:.1f}", dollars(tick))
            for tick in chart.ticks
            for y in [TOP + plot_h - tick / chart.top * plot_h]
        ),
    )
    bars = format_html_join(
        "",
        '<rect class="bar" data-series="{}" data-bucket="{}" x="{}" y="{}" width="{}" height="{}" fill="{}">'
        "<title>{} {}: {}</title></rect>",
        (
            (
                bar.series,
                bar.start.isoformat(),
                f"{bar.x:.2f}",
                f"{bar.y:.2f}",
                f"{bar.width:.2f}",
                f"{bar.height:.2f}",
                bar.colour,
                bar.series,
                bucket_label(bar.start, chart.unit),
                dollars(bar.dollars),
            )
            for bar in chart.bars
        ),
    )
    slot = (WIDTH - LEFT - RIGHT) / max(1, len(chart.starts))
    every = max(1, math.ceil(len(chart.starts) / 8))  # at most 8 time labels: they never overlap
    labels = format_html_join(
        "",
        '<text class="when" x="{}" y="{}" text-anchor="middle">{}</text>',
        (
            (f"{LEFT + (i + 0.5) * slot:.1f}", HEIGHT - BOTTOM + 16, bucket_label(start, chart.unit))
            for i, start in enumerate(chart.starts)
            if (len(chart.starts) - 1 - i) % every == 0
        ),
    )
    nothing = (
        format_html(
            '<text class="nothing" x="{}" y="{}" text-anchor="middle">no spend in this period</text>',
            LEFT + (WIDTH - LEFT - RIGHT) / 2,
            TOP + plot_h / 2,
        )
        if chart.empty
        else ""
    )
    axis_x = "hour (UTC)" if chart.unit == "hour" else "day (UTC)"
    body = format_html(
        '<svg class="chart" viewBox="0 0 {w} {h}" role="img" aria-label="{title}" preserveAspectRatio="xMidYMid meet">'
        "<title>{title}</title>{grid}"
        '<line class="axis" x1="{left}" x2="{left}" y1="{top}" y2="{base}"/>'
        '<line class="axis" x1="{left}" x2="{right}" y1="{base}" y2="{base}"/>'
        "{bars}{labels}{nothing}"
        '<text class="axis-label" transform="translate(14 {mid}) rotate(-90)" text-anchor="middle">dollars</text>'
        '<text class="axis-label" x="{cx}" y="{bottom}" text-anchor="middle">{axis_x}</text>'
        "</svg>",
        w=WIDTH,
        h=HEIGHT,
        title=chart.title,
        grid=grid,
        left=LEFT,
        right=WIDTH - RIGHT,
        top=TOP,
        base=TOP + plot_h,
        bars=bars,
        labels=labels,
        nothing=nothing,
        mid=TOP + plot_h / 2,
        cx=LEFT + (WIDTH - LEFT - RIGHT) / 2,
        bottom=HEIGHT - 6,
        axis_x=axis_x,
    )
    return mark_safe(body)  # noqa: S308  (format_html escaped every value)
