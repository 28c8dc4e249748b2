"""The launcher's SIGTERM → SIGKILL deadline follows the workers' shutdown grace.

It was a fixed 5 s: a user who gave the embedded workers a longer grace
(``GATEHOUSE_SHUTDOWN_GRACE_SECONDS``) had them SIGKILLed mid-run before it was over.
"""

from __future__ import annotations

import pytest

from console.embedded import SHUTDOWN_GRACE_SECONDS, STOP_MARGIN_SECONDS, STOP_SECONDS, environment, stop_seconds


def test_by_default_the_children_get_the_default_grace_and_the_margin(monkeypatch):
    monkeypatch.delenv("GATEHOUSE_SHUTDOWN_GRACE_SECONDS", raising=False)
    assert stop_seconds(environment()) == float(SHUTDOWN_GRACE_SECONDS) + STOP_MARGIN_SECONDS == STOP_SECONDS


@pytest.mark.parametrize("grace,expected", [("30", 32.0), ("0.5", 2.5), ("12.5", 14.5)])
def test_a_longer_or_shorter_grace_moves_the_kill_deadline_with_it(monkeypatch, grace, expected):
    monkeypatch.setenv("GATEHOUSE_SHUTDOWN_GRACE_SECONDS", grace)
    assert stop_seconds(environment()) == expected


@pytest.mark.parametrize("grace", ["", "soon", "nan", "inf"])
def test_a_grace_that_is_no_duration_leaves_the_default(grace):
    assert stop_seconds({"GATEHOUSE_SHUTDOWN_GRACE_SECONDS": grace}) == STOP_SECONDS
