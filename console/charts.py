"""Server-rendered SVG charts for the team dashboard: no JavaScript, no library, no CDN.

Each chart is an ``<svg role="img">`` with a ``<title>`` and ``<desc>``, every
mark has its own ``<title>`` (the number as text, read by screen readers and
shown as a tooltip), every bar or series links to the list behind it, and the
page shows the same numbers in tables beside the charts. Everything is escaped
with ``format_html``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from itertools import cycle

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

PALETTE = ("#1f6feb", "#d1242f", "#1a7f37", "#9a6700", "#8250df", "#bf3989", "#0a7ea4", "#57606a")
WIDTH = 640
# Bar labels: the label column is as wide as the longest label (12px text, ~7px a character, so
# nothing is clipped at the chart's left edge), up to LABEL_MAX_CHARS; a longer label loses its
# middle, never its end, where "p50" / "p95" tell a gate's two timing bars apart.
CHAR_W = 7
VALUE_MIN_W = 48  # the value column of a bar chart, at least (its bars end at the same place for short values)
LABEL_MAX_CHARS = 40
LABEL_TAIL_CHARS = 16


@dataclass
class Bar:
    label: str
    value: float
    text: str  # the value as shown (e.g. "12 min")
    link: str
    key: str = ""  # a stable name for the bar (tests and styles read data-key)
    colour: str = ""  # default: the palette in order


@dataclass
class Series:
    label: str
    points: list[tuple[datetime, int]]
    link: str


def duration_text(seconds: float) -> str:
    """A human duration: "42 s", "12 min", "3 h 5 min", "2 d 4 h"."""
    s = round(seconds)
    if s < 60:
        return f"{s} s"
    minutes, s = divmod(s, 60)
    if minutes < 60:
        return f"{minutes} min" + (f" {s} s" if s and minutes < 10 else "")
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h" + (f" {minutes} min" if minutes else "")
    days, hours = divmod(hours, 24)
    return f"{days} d" + (f" {hours} h" if hours else "")


def _svg(chart_id: str, title: str, desc: str, height: int, body: str) -> SafeString:
    return format_html(
        '<svg id="{}" class="chart" role="img" aria-labelledby="{}-title {}-desc" viewBox="0 0 {} {}" '
        'width="100%" preserveAspectRatio="xMinYMin meet" xmlns="http://www.w3.org/2000/svg">'
        '<title id="{}-title">{}</title><desc id="{}-desc">{}</desc>{}</svg>',
        chart_id,
        chart_id,
        chart_id,
        WIDTH,
        height,
        chart_id,
        title,
        chart_id,
        desc,
        mark_safe(body),  # noqa: S308 - built with format_html below
    )


def label_fit(label: str) -> str:
    """``label`` within LABEL_MAX_CHARS, shortened in the middle so its end stays readable."""
    if len(label) <= LABEL_MAX_CHARS:
        return label
    head = LABEL_MAX_CHARS - LABEL_TAIL_CHARS - 1
    return f"{label[:head]}…{label[-LABEL_TAIL_CHARS:]}"


def bar_chart(chart_id: str, title: str, bars: list[Bar], *, empty: str = "Nothing in this range.") -> SafeString:
    """Horizontal bars, one row each: label, bar (linked), value as text."""
    if not bars:
        return _svg(
            chart_id, title, empty, 30, str(format_html('<text x="0" y="20" class="chart-empty">{}</text>', empty))
        )
    row = 26
    shown = [label_fit(b.label) for b in bars]
    label_w = max(len(text) for text in shown) * CHAR_W + 16
    # The value column is as wide as the longest value (drawn 6 after its bar's end): a fixed 90 let a
    # longer value run off the chart's right edge.
    value_w = max(VALUE_MIN_W, max(len(b.text) for b in bars) * CHAR_W + 12)
    top = max((b.value for b in bars), default=0) or 1
    span = WIDTH - label_w - value_w
    rows = []
    for i, (bar, text, default) in enumerate(zip(bars, shown, cycle(PALETTE), strict=False)):
        colour = bar.colour or default
        y = i * row
        w = max(bar.value / top * span, 1 if bar.value else 0)
        rows.append(
            format_html(
                '<a href="{}" class="chart-bar" data-key="{}" data-value="{}">'
                "<title>{}: {}</title>"
                '<text x="{}" y="{}" text-anchor="end" class="chart-label">{}</text>'
                '<rect x="{}" y="{}" width="{}" height="{}" fill="{}"></rect>'
                '<text x="{}" y="{}" class="chart-value">{}</text></a>',
                bar.link,
                bar.key or bar.label,
                _num(bar.value),
                bar.label,
                bar.text,
                label_w - 8,
                y + 17,
                text,
                label_w,
                y + 4,
                f"{w:.1f}",
                row - 8,
                colour,
                f"{label_w + w + 6:.1f}",
                y + 17,
                bar.text,
            )
        )
    desc = "; ".join(f"{b.label}: {b.text}" for b in bars)
    return _svg(chart_id, title, desc, len(bars) * row + 4, "".join(rows))


def line_chart(chart_id: str, title: str, series: list[Series], *, empty: str = "Nothing pending.") -> SafeString:
    """Pending tasks over time: one linked polyline per series, every point titled with its count."""
    if not series or not series[0].points:
        return _svg(
            chart_id, title, empty, 30, str(format_html('<text x="0" y="20" class="chart-empty">{}</text>', empty))
        )
    height, left, right, top_pad, bottom = 240, 40, 10, 10, 30
    times = [at for at, _ in series[0].points]
    top = max((c for s in series for _, c in s.points), default=0) or 1
    n = len(times)
    plot_w, plot_h = WIDTH - left - right, height - top_pad - bottom

    def x(i: int) -> float:
        return left + (plot_w * i / (n - 1) if n > 1 else plot_w / 2)

    def y(count: int) -> float:
        return top_pad + plot_h - plot_h * count / top

    parts = [
        format_html(
            '<line x1="{}" y1="{}" x2="{}" y2="{}" class="chart-axis" stroke="#57606a"></line>'
            '<line x1="{}" y1="{}" x2="{}" y2="{}" class="chart-axis" stroke="#57606a"></line>'
            '<text x="{}" y="{}" text-anchor="end" class="chart-tick">{}</text>'
            '<text x="{}" y="{}" text-anchor="end" class="chart-tick">0</text>'
            '<text x="{}" y="{}" class="chart-tick">{}</text>'
            '<text x="{}" y="{}" text-anchor="end" class="chart-tick">{}</text>',
            left,
            top_pad,
            left,
            top_pad + plot_h,
            left,
            top_pad + plot_h,
            left + plot_w,
            top_pad + plot_h,
            left - 4,
            top_pad + 8,
            top,
            left - 4,
            top_pad + plot_h,
            left,
            height - 8,
            times[0].strftime("%Y-%m-%d %H:%M"),
            left + plot_w,
            height - 8,
            times[-1].strftime("%Y-%m-%d %H:%M"),
        )
    ]
    for s, colour in zip(series, cycle(PALETTE), strict=False):
        coords = " ".join(f"{x(i):.1f},{y(c):.1f}" for i, (_, c) in enumerate(s.points))
        dots = format_html_join(
            "",
            '<circle cx="{}" cy="{}" r="3" fill="{}" data-count="{}"><title>{} at {} UTC: {}</title></circle>',
            (
                (f"{x(i):.1f}", f"{y(c):.1f}", colour, c, s.label, at.strftime("%Y-%m-%d %H:%M"), c)
                for i, (at, c) in enumerate(s.points)
            ),
        )
        parts.append(
            format_html(
                '<a href="{}" class="chart-series" data-key="{}" data-now="{}"><title>{}: {} pending now</title>'
                '<polyline points="{}" fill="none" stroke="{}" stroke-width="2"></polyline>{}</a>',
                s.link,
                s.label,
                s.points[-1][1],
                s.label,
                s.points[-1][1],
                coords,
                colour,
                dots,
            )
        )
    desc = "; ".join(f"{s.label}: {s.points[-1][1]} pending at the end of the range" for s in series)
    return _svg(chart_id, title, desc, height, "".join(str(p) for p in parts))


def colour_of(index: int) -> str:
    return PALETTE[index % len(PALETTE)]


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.3f}"
