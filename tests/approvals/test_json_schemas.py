"""Schemas answers are checked against: reference loops are refused up front, and one that slips
through (stored before the check, or declared by a graph) is a clear refusal, never a RecursionError."""

from __future__ import annotations

from typing import Any

import pytest

from approvals import json_schemas, payloads
from approvals.errors import InvalidInput

LOOPS: list[dict[str, Any]] = [
    {"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"},
    {"$ref": "#"},
    {"allOf": [{"$ref": "#"}]},
    {"$defs": {"a": {"anyOf": [{"$ref": "#/$defs/b"}]}, "b": {"not": {"$ref": "#/$defs/a"}}}, "$ref": "#/$defs/a"},
    {"if": {"$ref": "#/$defs/a"}, "$defs": {"a": {"then": {"$ref": "#/$defs/a"}}}},
    {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "definitions": {"a": {"$ref": "#/definitions/a"}},
        "$ref": "#/definitions/a",
    },
    {
        "$schema": "http://json-schema.org/draft-04/schema#",
        "definitions": {"a": {"$ref": "#/definitions/a"}},
        "$ref": "#/definitions/a",
    },
]


@pytest.mark.parametrize("schema", LOOPS)
def test_a_schema_whose_references_loop_is_refused(schema):
    problem = json_schemas.schema_problem(schema)
    assert problem is not None and "loop" in problem


@pytest.mark.parametrize(
    "schema",
    [
        # Recursion that reads deeper into the value each time ends with the value: a tree.
        {
            "$defs": {"node": {"type": "object", "properties": {"children": {"items": {"$ref": "#/$defs/node"}}}}},
            "$ref": "#/$defs/node",
        },
        {"$defs": {"a": {"type": "string"}}, "allOf": [{"$ref": "#/$defs/a"}], "anyOf": [{"$ref": "#/$defs/a"}]},
        {"$ref": "https://json-schema.org/draft/2020-12/schema"},  # a bundled metaschema
    ],
)
def test_recursion_through_the_value_and_shared_definitions_are_not_loops(schema):
    assert json_schemas.schema_problem(schema) is None


def test_a_recursion_error_while_validating_is_an_unusable_schema_not_a_crash():
    # A validator built without schema_problem's check: what a schema stored before it would meet.
    validator = json_schemas.schema_validator_build(LOOPS[0])
    with pytest.raises(json_schemas.SchemaUnusable, match="nest too deeply, or loop"):
        json_schemas.first_error(validator, {"x": 1})


def test_a_graph_declared_args_schema_that_loops_refuses_the_edit_naming_the_field():
    payload = {"proposed_action": {"name": "pay", "args": {"amount": 1}, "args_schema": LOOPS[0]}}
    with pytest.raises(InvalidInput) as refused:
        payloads.action_args_check(payload, {"amount": 2})
    assert refused.value.field == "action_args" and "schema cannot be applied" in refused.value.message


def test_a_graph_declared_schema_nested_too_deeply_is_refused_not_a_recursion_error():
    schema: dict[str, Any] = {"type": "object"}
    for _ in range(5000):
        schema = {"properties": {"a": schema}}
    assert json_schemas.schema_problem(schema) is not None
    assert payloads.decisions_allowed({}, "interrupt", schema)  # the decision list still reads it
