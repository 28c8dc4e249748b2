"""Rows read by fixed SQL, made into model instances as the ORM makes them.

The hottest key lookups (a claim, a thread read, an API token) are written out once per process
instead of composed and compiled by the ORM on every call, which cost several times their round
trip in CPU. Their rows still become models the ORM's way: each column through the converters the
ORM applies (the backend's, then the field's: JSON text parsed, SQLite's text dates and UUIDs
read), then ``Model.from_db``. On PostgreSQL they run on ``fixed_cursor``, which prepares them: a
statement whose text never changes is planned once per connection, not on every call.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, TypeVar

from django.db import connection
from django.db.backends.utils import CursorWrapper
from django.db.models import Field, Model

M = TypeVar("M", bound=Model)


def fixed_cursor() -> CursorWrapper:
    """A cursor for SQL whose text is fixed and whose values are all parameters: prepared on
    PostgreSQL (``runtime.postgresql``'s ``prepared_cursor``), Django's own cursor elsewhere."""
    prepared = getattr(connection, "prepared_cursor", None)
    return prepared() if prepared is not None else connection.cursor()


def _fields(model: type[Model], exclude: tuple[str, ...]) -> list[Any]:
    return [f for f in model._meta.concrete_fields if f.name not in exclude]


@functools.cache
def _shape(
    model: type[Model], vendor: str, exclude: tuple[str, ...] = ()
) -> tuple[list[tuple[list[Any], Any]], list[str]]:
    """Each selected field's converters with the expression they are called with; the attnames."""
    meta = model._meta
    converters = []
    fields = _fields(model, exclude)
    for field in fields:
        expression = field.get_col(meta.db_table)
        functions = [*connection.ops.get_db_converters(expression), *expression.get_db_converters(connection)]
        converters.append((functions, expression))
    return converters, [f.attname for f in fields]


@functools.cache
def _columns(model: type[Model], alias: str, vendor: str, exclude: tuple[str, ...] = ()) -> str:
    quote = connection.ops.quote_name
    prefix = f"{alias}." if alias else ""
    return ", ".join(f"{prefix}{quote(str(f.column))}" for f in _fields(model, exclude))


def columns(model: type[Model], alias: str = "", *, exclude: tuple[str, ...] = ()) -> str:
    """The model's concrete columns, quoted, in field order (``alias.`` before each if given), less
    the fields named in ``exclude`` (left deferred): what ``model_from_row`` reads back."""
    return _columns(model, alias, connection.vendor, exclude)


def width(model: type[Model], *, exclude: tuple[str, ...] = ()) -> int:
    """How many values of a row ``columns(model, exclude=...)`` selects."""
    return len(_fields(model, exclude))


def model_from_row(model: type[M], values: Sequence[Any], *, exclude: tuple[str, ...] = ()) -> M:
    """An instance of ``model`` from the values of ``columns(model, exclude=...)``, as the ORM loads
    one (the excluded fields deferred, as ``QuerySet.defer`` leaves them)."""
    converters, attnames = _shape(model, connection.vendor, exclude)
    loaded = []
    for value, (functions, expression) in zip(values, converters, strict=True):
        for convert in functions:
            value = convert(value, expression, connection)
        loaded.append(value)
    return model.from_db(connection.alias, attnames, loaded)


def models_knowing(model: type[M], found: Sequence[Sequence[Any]], field: str, owner: Model) -> list[M]:
    """Instances of ``model`` from ``found`` (rows of ``columns(model)``), each with its ``field`` (a
    foreign key) set to ``owner`` already, as the rows of ``owner``'s related manager come."""
    relation = model._meta.get_field(field)
    made = []
    for row in found:
        instance = model_from_row(model, row)
        relation.set_cached_value(instance, owner)  # type: ignore[union-attr]
        made.append(instance)
    return made


def model_and_related(model: type[M], field: str, related: type[Model], row: Sequence[Any]) -> M:
    """An instance of ``model`` from the first ``width(model)`` values of ``row``, with its ``field``
    set to the ``related`` instance the rest make (``select_related(field)``'s one row)."""
    split = width(model)
    instance = model_from_row(model, row[:split])
    model._meta.get_field(field).set_cached_value(instance, model_from_row(related, row[split:]))  # type: ignore[union-attr]
    return instance


def db_value(model: type[Model], name: str, value: Any) -> Any:
    """``value`` as the ORM sends it for ``model``'s field ``name`` (``"pk"``: the key) to this connection,
    for a fixed statement's parameters (a UUID is text on SQLite; a foreign key goes as its target's)."""
    field = model._meta.pk if name == "pk" else model._meta.get_field(name)
    if not isinstance(field, Field):
        raise TypeError(f"{model._meta.label}.{name} is not a column")
    return field.get_db_prep_value(value, connection)


@functools.cache
def _insert(model: type[Model], vendor: str) -> tuple[str, list[Any], bool]:
    """The insert of every concrete field but a database-drawn primary key, returning that key; whether
    it returns one."""
    meta = model._meta
    pk = meta.pk
    drawn = pk is not None and pk.db_returning  # an auto field: the database draws it
    fields = [f for f in meta.concrete_fields if not (drawn and f is pk)]
    quote = connection.ops.quote_name
    names = ", ".join(quote(str(f.column)) for f in fields)
    marks = ", ".join(["%s"] * len(fields))
    returning = f" RETURNING {quote(str(pk.column))}" if drawn and pk is not None else ""
    return f"INSERT INTO {quote(meta.db_table)} ({names}) VALUES ({marks}){returning}", fields, drawn  # noqa: S608


def row_insert(obj: M, *, along: tuple[str, Sequence[Any]] | None = None) -> M:
    """Insert ``obj`` by one fixed statement (prepared on PostgreSQL) and give it its drawn key.

    What ``save(force_insert=True)`` writes, without composing the query on every call, and like
    ``bulk_create`` without model signals: for rows written on every run (nothing listens to them).

    ``along``: another fixed write (an ``UPDATE`` or ``DELETE``: its SQL and parameters) that goes with
    the insert. On PostgreSQL it is a data-modifying ``WITH`` of the insert's statement, one round
    trip instead of two; elsewhere (SQLite's ``WITH`` only reads) it follows the insert on the same
    cursor. Either way it is written only if the insert is: an insert that raises (an
    ``IntegrityError``) writes neither, and its error is the insert's, constraint name included.
    """
    sql, fields, drawn = _insert(type(obj), connection.vendor)
    values = [f.get_db_prep_save(f.pre_save(obj, True), connection) for f in fields]
    with fixed_cursor() as cursor:
        if along is not None and connection.vendor == "postgresql":
            cursor.execute(_with_along(along[0], sql), [*along[1], *values])
            along = None  # written by the insert's statement
        else:
            cursor.execute(sql, values)
        if drawn:
            obj.pk = cursor.fetchone()[0]
        if along is not None:
            cursor.execute(along[0], along[1])
    obj._state.adding, obj._state.db = False, connection.alias
    return obj


@functools.cache
def _with_along(write: str, insert: str) -> str:
    """The insert with ``write`` as its data-modifying ``WITH`` (fixed texts: composed once per pair)."""
    return f"WITH along_write AS ({write}) {insert}"
