"""The dashboard's SVG bar chart: its label column fits the labels, and a long label keeps its end."""

from __future__ import annotations

import re

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
