"""The dashboard's SVG bar chart: its label column fits the labels, and a long label keeps its end."""

from __future__ import annotations

import html
import re

import pytest

from console import charts


def _bar(label: str) -> charts.Bar:
    return charts.Bar(label, 60, "1 min", "/", label)


def _labels(svg: str) -> list[tuple[float, str]]:
    return [
        (float(x), text)
        for x, text in re.findall(r'<text x="([\d.]+)" y="\d+" text-anchor="end" class="chart-label">([^<]*)<', svg)
    ]


def test_the_label_column_is_as_wide_as_the_longest_label():
    label = "loan_approval / human_review p50"  # 32 characters: clipped at the left in a 200 px column
    [(x, text)] = _labels(str(charts.bar_chart("c", "t", [_bar(label)])))
    assert text == label
    assert x >= len(label) * charts.CHAR_W  # the text, drawn right-aligned at x, starts inside the chart


def test_a_long_label_is_shortened_in_the_middle_and_keeps_its_p50_p95_suffix():
    long = "kyc_onboarding_with_a_long_name / compliance_review"
    svg = str(charts.bar_chart("c", "t", [_bar(f"{long} p50"), _bar(f"{long} p95")]))
    (_, p50), (_, p95) = _labels(svg)
    assert p50.endswith("review p50") and p95.endswith("review p95") and "…" in p50
    assert len(p50) == charts.LABEL_MAX_CHARS
    assert f"<title>{long} p50: 1 min</title>" in svg  # the whole label, as the bar's tooltip


def _texts(svg: str) -> list[tuple[float, str, str]]:
    """Every <text> of a chart: its x, anchor ("" for start) and content."""
    return [
        (float(x), anchor, html.unescape(text))
        for x, anchor, text in re.findall(r'<text x="([\d.]+)" y="[\d.]+"(?: text-anchor="(\w+)")?[^>]*>([^<]*)<', svg)
    ]


@pytest.mark.parametrize(
    "values",
    [
        [("reviewer", 10, "10"), ("approver", 2, "2")],
        [("p50", 61, "1 min 1 s"), ("p95", 90061, "1 d 1 h")],
        [("webhook", 1234567, "1,234,567 decisions"), ("person", 3, "3 decisions")],
    ],
)
def test_every_text_of_a_bar_chart_lies_inside_its_view_box(values):
    """The top bar's value was drawn from x=556: a value wider than the 84 units left ran off the chart."""
    svg = str(charts.bar_chart("c", "t", [charts.Bar(label, value, text, "/", label) for label, value, text in values]))
    width = float(re.search(r'viewBox="0 0 ([\d.]+) ', svg).group(1))
    texts = _texts(svg)
    assert len(texts) == 2 * len(values)
    for x, anchor, text in texts:
        drawn = len(text) * charts.CHAR_W  # the estimate the chart sizes its columns by
        left, right = (x - drawn, x) if anchor == "end" else (x, x + drawn)
        assert left >= 0 and right <= width, (text, left, right, width)
