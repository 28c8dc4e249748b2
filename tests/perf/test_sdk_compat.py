"""bench/sdk_compat.py compares every mode /lg/ offers, and for ``events`` what a client tells events apart by."""

from __future__ import annotations

from bench.sdk_compat import CLIENT_MODES, _seen
from runtime.stream import CLIENT_MODES as OFFERED


def test_the_comparison_covers_every_mode_the_platform_api_offers():
    assert CLIENT_MODES == OFFERED


def test_an_events_event_is_compared_by_kind_run_name_tags_and_data_keys_not_by_values():
    event = {"event": "on_chain_stream", "name": "score_risk", "tags": ["graph:step:2"], "run_id": "a", "data": {}}
    mine = _seen("events", {**event, "data": {"chunk": {"risk": 0.6}}}, "events")
    theirs = _seen("events", {**event, "run_id": "b", "data": {"chunk": {"risk": 0.7}}}, "events")
    assert mine == theirs == ["on_chain_stream", "score_risk", ["graph:step:2"], ["chunk"]]
    assert _seen("events", {**event, "data": {"chunk": 1, "input": 2}}, "events") != mine
    assert _seen("values", {"risk": 0.6}, "values") == "values"
