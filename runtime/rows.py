"""Rows read by fixed SQL, made into model instances as the ORM makes them.

The hottest key lookups (a claim, a thread read, an API token) are written out once per process
instead of composed and compiled by the ORM on every call, which cost several times their round
trip in CPU. Their rows still become models the ORM's way: each column through the converters the
ORM applies (the backend's, then the field's: JSON text parsed, SQLite's text dates and UUIDs
read), then ``Model.from_db``.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, TypeVar

from django.db import connection
from django.db.models import Model

M = TypeVar("M", bound=Model)


@functools.cache
def _shape(model: type[Model], vendor: str) -> tuple[list[tuple[list[Any], Any]], list[str]]:
    """Each concrete field's converters with the expression they are called with; the attnames."""
    meta = model._meta
    converters = []
    for field in meta.concrete_fields:
        expression = field.get_col(meta.db_table)
        functions = [*connection.ops.get_db_converters(expression), *expression.get_db_converters(connection)]
        converters.append((functions, expression))
    return converters, [f.attname for f in meta.concrete_fields]


@functools.cache
def _columns(model: type[Model], alias: str, vendor: str) -> str:
    quote = connection.ops.quote_name
    prefix = f"{alias}." if alias else ""
    return ", ".join(f"{prefix}{quote(str(f.column))}" for f in model._meta.concrete_fields)


def columns(model: type[Model], alias: str = "") -> str:
    """The model's concrete columns, quoted, in field order (``alias.`` before each if given):
    what ``model_from_row`` reads back."""
    return _columns(model, alias, connection.vendor)


def width(model: type[Model]) -> int:
    """How many values of a row ``columns(model)`` selects."""
    return len(model._meta.concrete_fields)


def model_from_row(model: type[M], values: Sequence[Any]) -> M:
    """An instance of ``model`` from the values of ``columns(model)``, as the ORM loads one."""
    converters, attnames = _shape(model, connection.vendor)
    loaded = []
    for value, (functions, expression) in zip(values, converters, strict=True):
        for convert in functions:
            value = convert(value, expression, connection)
        loaded.append(value)
    return model.from_db(connection.alias, attnames, loaded)
