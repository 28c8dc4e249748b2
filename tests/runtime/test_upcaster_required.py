"""The fields a checkpoint must hold after its upcasters ran (``runtime.upcasters.required_fields``).

A Pydantic dataclass's ``x: int = Field(gt=0)`` has, for ``dataclasses``, a default (the ``Field``), so it was
taken for optional: a checkpoint without it was upcast and rewritten, and the run failed later in LangGraph
instead of with ``CheckpointLoadError`` naming the field. ``state_schema.required_keys`` had the same bug.
"""

from __future__ import annotations

import dataclasses

import pytest
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
