"""The fields a checkpoint must hold after its upcasters ran (``runtime.upcasters.required_fields``).

A Pydantic dataclass's ``x: int = Field(gt=0)`` has, for ``dataclasses``, a default (the ``Field``), so it was
taken for optional: a checkpoint without it was upcast and rewritten, and the run failed later in LangGraph
instead of with ``CheckpointLoadError`` naming the field. ``state_schema.required_keys`` had the same bug.
"""

from __future__ import annotations

import dataclasses
from typing import Required, TypedDict

import pytest
import typing_extensions
from pydantic import BaseModel, Field
from pydantic.dataclasses import dataclass as pydantic_dataclass

from runtime.upcasters import required_fields, schema_build


@pydantic_dataclass
class _PydanticDataclass:
    amount: int = Field(gt=0)  # required: the Field gives no value
    client: str = Field(min_length=1)
    note: str = Field(default="")
    tags: list[str] = Field(default_factory=list)
    count: int = 0


class _Model(BaseModel):
    amount: int = Field(gt=0)
    note: str = Field(default="")
    count: int = 0


@dataclasses.dataclass
class _Dataclass:
    amount: int
    tags: list[str] = dataclasses.field(default_factory=list)
    count: int = 0


@pytest.mark.parametrize(
    "schema,required",
    [(_PydanticDataclass, ["amount", "client"]), (_Model, ["amount"]), (_Dataclass, ["amount"])],
)
def test_a_field_without_a_value_is_required_whatever_declares_it(schema, required):
    assert required_fields(schema) == required


def test_the_graph_schema_requires_a_pydantic_dataclass_field_declared_with_a_bare_field():
    schema = schema_build("g", _PydanticDataclass, version=2, upcasters={1: lambda values: values})
    assert schema.required == ("amount", "client")


class _Typed(TypedDict, total=False):
    amount: Required[int]
    note: str


class _TypedTotal(TypedDict):
    cost_center: Required[str]
    note: str


class _Derived(_Typed):
    client: typing_extensions.Required[str]


@pytest.mark.parametrize(
    "schema,required", [(_Typed, ["amount"]), (_TypedTotal, ["cost_center"]), (_Derived, ["amount", "client"])]
)
def test_a_typeddict_key_marked_required_is_required_under_postponed_annotations(schema, required):
    """An outside tester's find: this module's ``from __future__ import annotations`` (the demo graphs' too) makes
    each annotation a ``ForwardRef('Required[str]')``: no key was required, so a checkpoint without the new
    ``cost_center`` was rewritten as the new version before its node failed, and the upcaster deployed next
    never ran on it (the thread could not be retried)."""
    assert required_fields(schema) == required


def test_a_required_key_whose_type_cannot_be_resolved_is_still_required():
    namespace: dict[str, object] = {}
    exec(  # noqa: S102 - a graph module whose annotation names a type it no longer holds
        "from __future__ import annotations\nfrom typing import Required, TypedDict\n"
        "class State(TypedDict, total=False):\n    gone: Required[NoSuchType]\n    note: str\n",
        namespace,
    )
    assert required_fields(namespace["State"]) == ["gone"]  # type: ignore[arg-type]
