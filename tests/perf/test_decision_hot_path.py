"""The decision path compiles a gate's response schema once per process, and still names the field."""

from __future__ import annotations

import pytest

from approvals.errors import InvalidInput
from approvals.payloads import _schema_check, schema_validator

SCHEMA = {"type": "object", "properties": {"amount": {"type": "integer", "maximum": 100}}, "required": ["amount"]}


def test_a_schema_is_compiled_once_and_reused():
    schema_validator.cache_clear()
    _schema_check({"amount": 5}, SCHEMA, "resume")
    _schema_check({"amount": 7}, dict(reversed(list(SCHEMA.items()))), "resume")  # same schema, other key order
    info = schema_validator.cache_info()
    assert (info.misses, info.hits) == (1, 1)


def test_a_cached_validator_still_names_the_failing_field():
    with pytest.raises(InvalidInput) as first:
        _schema_check({"amount": 500}, SCHEMA, "resume")
    with pytest.raises(InvalidInput) as again:
        _schema_check({"amount": 500}, SCHEMA, "resume")
    assert first.value.field == again.value.field == "resume.amount"
    assert "500 is greater than the maximum of 100" in first.value.message


def test_an_unreadable_schema_refuses_the_answer_it_cannot_check():
    """It used to be skipped, letting an unchecked answer through to the graph."""
    with pytest.raises(InvalidInput) as refused:
        _schema_check({"amount": 5}, {"type": "no-such-type"}, "resume")
    assert refused.value.field == "resume" and "schema cannot be applied" in refused.value.message
