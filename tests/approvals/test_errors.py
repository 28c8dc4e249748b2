"""``validation_error_describe``: a field named as the client sent it, from pydantic's error locations.

The errors are pydantic's own (a model validated here), located as ninja locates them: the source
("body", "query", "path") and the parameter's name come first.
"""

from __future__ import annotations

from typing import Annotated, Any

import pytest
from pydantic import AfterValidator, BaseModel, ValidationError

from approvals.errors import InvalidInput, validation_error_describe


class Item(BaseModel):
    a: int


class Body(BaseModel):
    before: str | dict[str, Any] | None = None
    stream_mode: str | list[str] | None = None
    index: bool | list[str] | None = None
    checked: Annotated[str, AfterValidator(str.strip)] | int = 0
    items: Item | list[Item] | None = None
    assignments: list[dict[str, int]] = []


def _described(data: dict[str, Any]) -> tuple[str | None, str]:
    try:
        Body.model_validate(data)
    except ValidationError as exc:
        errors = [{**e, "loc": ("body", "body", *e["loc"])} for e in exc.errors()]
        described = validation_error_describe(errors)
        assert isinstance(described, InvalidInput)
        return described.field, described.message
    raise AssertionError(f"{data} was valid")


@pytest.mark.parametrize(
    "data,field",
    [
        ({"before": 5}, "before"),  # pydantic says before.str and before.dict[str,any]
        ({"stream_mode": ["values", 5]}, "stream_mode[1]"),  # the list member reached the bad item
        ({"stream_mode": 5}, "stream_mode"),
        ({"index": 5}, "index"),
        ({"index": ["a", 5]}, "index[1]"),
        ({"checked": 1.5}, "checked"),  # function-after[<lambda>(), str]
        ({"items": [{"a": "x"}]}, "items[0].a"),
        ({"assignments": [{"gate": "x"}]}, "assignments[0].gate"),  # no union: as before
    ],
)
def test_a_union_member_tag_is_no_part_of_the_field(data, field):
    assert _described(data)[0] == field


def test_the_message_is_the_error_of_the_member_that_reached_deepest():
    field, message = _described({"stream_mode": ["values", 5]})
    assert message == f"{field}: Input should be a valid string"


def _error(*loc: str, msg: str = "Input should be a valid string") -> dict[str, Any]:
    return {"loc": ("body", "body", *loc), "msg": msg, "type": "x"}


def test_an_error_of_another_field_is_not_taken_for_a_union_member():
    errors = [
        _error("stream_mode", "str"),
        _error("stream_mode", "list[str]", msg="Input should be a valid list"),
        _error("limit", msg="Input should be a valid integer"),
        _error("metadata", "a", "b", "c", msg="deeper, but another field"),
    ]
    described = validation_error_describe(errors)
    assert (described.field, described.message) == ("stream_mode", "stream_mode: Input should be a valid string")
