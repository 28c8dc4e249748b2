"""Inbox columns per gate: declared once, parsed once, shown redacted, sorted and filtered in the database.

A gate declares the payload values its inbox rows show, in ``langgraph.json``::

    "gatehouse": {"columns": {"loan_approval": {"human_review": [
        {"key": "amount", "path": "/amount", "label": "Amount", "type": "money", "currency": "EUR"},
        {"key": "risk", "path": "/details/risk_score", "type": "risk", "scale": [0, 1]}]}}}

or in its interrupt payload (``"columns": [...]``, same shape; the configuration wins).
``path`` is a JSON Pointer into the interrupt payload. Types: ``text``, ``number``,
``money`` and ``risk`` (shown against its ``scale``, default [0, 100]).

The configuration is parsed when the graph registry loads (a bad one stops start-up,
naming the key); a payload's declaration is parsed when its inbox is shown (a bad
one is ignored and logged: a running graph must not break the inbox). Values are
shown through the redaction policy: a column whose path is redacted for the viewer
is masked, and sorting or filtering by it is refused (the order would leak it).
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.db.models import F, FloatField, Func, Q, QuerySet, TextField

from approvals import gateway, permissions
from approvals.errors import InvalidInput
from approvals.models import ApprovalTask
from approvals.redaction import MASK, redact
from approvals.text_search import ContainsText
from runtime.registry import UnknownGraph, graph_get, graph_names

log = logging.getLogger(__name__)

COLUMN_TYPES = ("text", "number", "money", "risk")
NUMERIC = ("number", "money", "risk")
MAX_COLUMNS = 8
MAX_DEPTH = 8
_KEY = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
_FIELDS = {"key", "path", "label", "type", "scale", "currency"}


class ColumnError(ValueError):
    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True)
class Column:
    key: str
    path: tuple[str, ...]
    label: str
    type: str = "text"
    scale: tuple[float, float] | None = None
    currency: str = ""

    @property
    def numeric(self) -> bool:
        return self.type in NUMERIC

    @property
    def pointer(self) -> str:
        return "/" + "/".join(s.replace("~", "~0").replace("/", "~1") for s in self.path)


def _pointer_parse(value: Any, field: str) -> tuple[str, ...]:
    if not isinstance(value, str) or not value.startswith("/") or value == "/":
        raise ColumnError('must be a JSON Pointer into the payload, like "/amount"', field=field)
    segments = tuple(s.replace("~1", "/").replace("~0", "~") for s in value[1:].split("/"))
    if any(not s for s in segments) or len(segments) > MAX_DEPTH:
        raise ColumnError(f"must name 1 to {MAX_DEPTH} non-empty keys", field=field)
    return segments


def _scale_parse(value: Any, field: str) -> tuple[float, float]:
    if (
        not isinstance(value, list | tuple)
        or len(value) != 2
        or not all(isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in value)
        or not value[0] < value[1]
    ):
        raise ColumnError("must be [low, high] with low < high", field=field)
    return float(value[0]), float(value[1])


def columns_parse(raw: Any, *, where: str) -> tuple[Column, ...]:
    """The columns ``raw`` declares; ``ColumnError`` naming ``where[i].field`` for the first problem."""
    if not isinstance(raw, list):
        raise ColumnError("must be a list of columns", field=where)
    if len(raw) > MAX_COLUMNS:
        raise ColumnError(f"at most {MAX_COLUMNS} columns per gate", field=where)
    out: list[Column] = []
    for index, item in enumerate(raw):
        at = f"{where}[{index}]"
        if not isinstance(item, dict):
            raise ColumnError('must be an object like {"key": "amount", "path": "/amount"}', field=at)
        unknown = sorted(set(item) - _FIELDS)
        if unknown:
            raise ColumnError(f"unknown key (keys: {', '.join(sorted(_FIELDS))})", field=f"{at}.{unknown[0]}")
        key = item.get("key")
        if not isinstance(key, str) or not _KEY.match(key):
            raise ColumnError("must be lower-case letters, digits and _ (up to 40)", field=f"{at}.key")
        if any(c.key == key for c in out):
            raise ColumnError(f"{key!r} is declared twice", field=f"{at}.key")
        kind = item.get("type", "text")
        if kind not in COLUMN_TYPES:
            raise ColumnError(f"must be one of {', '.join(COLUMN_TYPES)}", field=f"{at}.type")
        label = item.get("label", key.replace("_", " ").capitalize())
        if not isinstance(label, str) or not label.strip() or len(label) > 60:
            raise ColumnError("must be text of 1 to 60 characters", field=f"{at}.label")
        currency = item.get("currency", "")
        if not isinstance(currency, str) or len(currency) > 8 or (currency and kind != "money"):
            raise ColumnError("is a short code, for money columns only", field=f"{at}.currency")
        scale = None
        if kind == "risk":
            scale = _scale_parse(item.get("scale", [0, 100]), f"{at}.scale")
        elif "scale" in item:
            raise ColumnError("is for risk columns only", field=f"{at}.scale")
        out.append(Column(key, _pointer_parse(item.get("path"), f"{at}.path"), label, kind, scale, currency))
    return tuple(out)


def columns_from_config(graph: str, gatehouse: dict[str, Any]) -> dict[str, tuple[Column, ...]]:
    """Registered with the graph registry for ``"gatehouse": {"columns": {graph: {gate: [...]}}}``."""
    section = gatehouse.get("columns", {})
    if not isinstance(section, dict):
        raise ColumnError("must map graph names to {gate: [columns]}", field="gatehouse.columns")
    gates = section.get(graph)
    if gates is None:
        return {}
    if not isinstance(gates, dict):
        raise ColumnError("must map gate names to lists of columns", field=f"gatehouse.columns.{graph}")
    return {gate: columns_parse(raw, where=f"gatehouse.columns.{graph}.{gate}") for gate, raw in gates.items()}


def _configured(graph: str) -> dict[str, tuple[Column, ...]]:
    try:
        configured: dict[str, tuple[Column, ...]] = graph_get(graph).options.get("columns", {})
        return configured
    except UnknownGraph:
        return {}


def gate_columns(*, user: permissions.Principal, graph: str, node: str) -> tuple[Column, ...]:
    """The columns of gate ``node`` (of ``graph``, or of any visible graph with that gate)."""
    if not node:
        return ()
    graphs = [graph] if graph else graph_names()
    for name in graphs:
        found = _configured(name).get(node)
        if found:
            return found
    newest = permissions.tasks_visible(user).filter(node=node, payload__has_key="columns")
    if graph:
        newest = newest.filter(graph=graph)
    task = newest.order_by("-created_at").only("payload", "graph").first()
    if task is None or not isinstance(task.payload, dict):
        return ()
    try:
        return columns_parse(task.payload["columns"], where="payload.columns")
    except ColumnError as exc:
        log.warning("gate %s/%s declares columns Gatehouse cannot use: %s", task.graph, node, exc)
        return ()


# --- redaction -------------------------------------------------------------------------------------


def _nest(path: Sequence[str], value: Any) -> Any:
    for segment in reversed(path):
        value = {segment: value}
    return value


def _dig(value: Any, path: Sequence[str]) -> Any:
    for segment in path:
        if isinstance(value, dict):
            value = value.get(segment)
        elif isinstance(value, list) and segment.isdigit() and int(segment) < len(value):
            value = value[int(segment)]
        else:
            return None
    return value


def column_redacted(column: Column, paths: Sequence[str]) -> bool:
    """Would ``paths`` mask this column's value, or anything inside it?"""
    return bool(paths) and bool(redact(_nest(column.path, {"*": 0}), paths)[1])


def masked_paths(user: permissions.Principal, graph: str) -> list[str]:
    if graph:
        return gateway.paths_masked_for(user, graph)
    visible = permissions.graphs_visible(user)
    names = graph_names() if visible is None else sorted(visible)
    return sorted({p for name in names for p in gateway.paths_masked_for(user, name)})


@dataclass(frozen=True)
class Cell:
    column: Column
    value: Any
    masked: bool = False

    @property
    def fraction(self) -> float | None:
        """Where a risk value sits on its scale, 0..1 (for the bar)."""
        if self.masked or self.column.scale is None or not _is_number(self.value):
            return None
        low, high = self.column.scale
        return min(max((float(self.value) - low) / (high - low), 0.0), 1.0)

    @property
    def low(self) -> float:
        """A third of the way up the scale: below it the meter shows green (low risk is optimal)."""
        low, high = self.column.scale or (0.0, 100.0)
        return low + (high - low) / 3

    @property
    def high(self) -> float:
        low, high = self.column.scale or (0.0, 100.0)
        return low + 2 * (high - low) / 3

    @property
    def text(self) -> str:
        if self.masked:
            return MASK
        if self.value is None:
            return "—"
        if self.column.type == "risk" and self.column.scale is not None and _is_number(self.value):
            return f"{_number(self.value)} / {_number(self.column.scale[1])}"
        if self.column.type == "money" and _is_number(self.value):
            amount = f"{float(self.value):,.2f}"
            return f"{amount} {self.column.currency}".strip()
        if _is_number(self.value):
            return _number(self.value)
        return str(self.value) if not isinstance(self.value, dict | list) else "…"


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _number(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def cells_for(
    *, user: permissions.Principal, tasks: Iterable[ApprovalTask], columns: Sequence[Column]
) -> dict[Any, list[Cell]]:
    """Each task's cells as ``user`` may see them (one guarded read per graph: one audited reveal)."""
    if not columns:
        return {}
    by_graph: dict[str, list[ApprovalTask]] = {}
    for task in tasks:
        by_graph.setdefault(task.graph, []).append(task)
    out: dict[Any, list[Cell]] = {}
    for graph, group in by_graph.items():
        projections = [[_nest(c.path, _dig(t.payload, c.path)) for c in columns] for t in group]
        shown, applied = gateway.guard(user, graph, projections, subject=f"graph:{graph}")
        for task, row in zip(group, shown, strict=True):
            cells = []
            for column, projection in zip(columns, row, strict=True):
                value = _dig(projection, column.path)
                masked = bool(applied) and (value == MASK or MASK in repr(value))
                cells.append(Cell(column, None if masked else value, masked))
            out[task.pk] = cells
    return out


# --- the database side: sort and filter by a payload value on PostgreSQL and SQLite -------------------


class PayloadValue(Func):
    """The payload's value at a column's path: a number for numeric columns (NULL if not a number), else text."""

    def __init__(self, column: Column) -> None:
        self.column_path = column.path
        self.numeric = column.numeric
        super().__init__(F("payload"), output_field=FloatField() if column.numeric else TextField())

    def as_postgresql(self, compiler: Any, connection: Any, **extra: Any) -> tuple[str, list[Any]]:
        payload, params = compiler.compile(self.source_expressions[0])
        path = list(self.column_path)
        if self.numeric:
            sql = f"(CASE WHEN jsonb_typeof({payload} #> %s) = 'number' THEN ({payload} #>> %s)::double precision END)"
            return sql, [*params, path, *params, path]
        return f"({payload} #>> %s)", [*params, path]

    def as_sqlite(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        payload, params = compiler.compile(self.source_expressions[0])
        path = "$" + "".join('."' + s.replace('"', '\\"') + '"' for s in self.column_path)
        types = "('integer', 'real')" if self.numeric else "('text', 'integer', 'real')"
        sql = f"(CASE WHEN json_type({payload}, %s) IN {types} THEN json_extract({payload}, %s) END)"
        return sql, [*params, path, *params, path]


# ASCII digits only: \d is any script's digit, which float() then reads (Arabic-Indic 100 as 100).
_RANGE = re.compile(r"^\s*(-?[\d.]+(?:e-?\d+)?)?\s*\.\.\s*(-?[\d.]+(?:e-?\d+)?)?\s*$", re.IGNORECASE | re.ASCII)
_COMPARE = re.compile(r"^\s*(>=|<=|>|<|=)?\s*(-?[\d.]+(?:e-?\d+)?)\s*$", re.IGNORECASE | re.ASCII)


def _float(text: str, field: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise InvalidInput(f"{text!r} is not a number", field=field) from None
    if not math.isfinite(value):
        raise InvalidInput("must be a finite number", field=field)
    return value


def _column_q(column: Column, name: str, raw: str, field: str) -> Q:
    if not column.numeric:
        return Q(ContainsText(F(name), raw.strip()))
    ranged = _RANGE.match(raw)
    if ranged and (ranged.group(1) or ranged.group(2)):
        q = Q()
        if ranged.group(1):
            q &= Q(**{f"{name}__gte": _float(ranged.group(1), field)})
        if ranged.group(2):
            q &= Q(**{f"{name}__lte": _float(ranged.group(2), field)})
        return q
    compared = _COMPARE.match(raw)
    if not compared:
        raise InvalidInput("a number, a comparison like >=1000, or a range like 10..20", field=field)
    lookup = {">=": "gte", "<=": "lte", ">": "gt", "<": "lt", "=": "exact", None: "exact"}[compared.group(1)]
    return Q(**{f"{name}__{lookup}": _float(compared.group(2), field)})


def _checked(column: Column, masked: Sequence[str], field: str) -> Column:
    if column_redacted(column, masked):
        raise InvalidInput(f"the column {column.label!r} is redacted for you", field=field)
    return column


def _unknown_column(key: str, node: str, columns: Mapping[str, Column], doing: str) -> str:
    """Why there is no column ``key`` to ``doing``, in words that are true: no gate chosen, a key no column
    could have (a filter typed as ``c.amount>=5``: its name is ``c.amount>``), or one this gate lacks."""
    if not node:
        return f"columns belong to a gate: choose a gate to {doing} {key!r}"
    if not _KEY.match(key):
        return (
            f"{key!r} is no column's key (lower-case letters, digits and _): "
            "a column filter is c.<key>=<filter>, e.g. c.amount=>=1000"
        )
    known = f"its columns: {', '.join(columns)}" if columns else "it declares no inbox columns"
    return f"the gate {node!r} has no column {key!r} to {doing} ({known})"


def columns_filter(
    qs: QuerySet[ApprovalTask], *, user: permissions.Principal, graph: str, node: str, filters: Mapping[str, str]
) -> QuerySet[ApprovalTask]:
    """Filter by ``filters`` ({column key: expression}); refuses unknown and redacted columns, naming ``c.<key>``."""
    wanted = {k: v for k, v in filters.items() if v.strip()}
    if not wanted:
        return qs
    columns = {c.key: c for c in gate_columns(user=user, graph=graph, node=node)}
    masked = masked_paths(user, graph)
    for key, raw in wanted.items():
        if key not in columns:
            raise InvalidInput(_unknown_column(key, node, columns, "filter by"), field=f"c.{key}")
        column = _checked(columns[key], masked, f"c.{key}")
        alias = f"filter_{column.key}"
        qs = qs.alias(**{alias: PayloadValue(column)}).filter(_column_q(column, alias, raw, f"c.{key}"))
    return qs


def column_for_sort(*, user: permissions.Principal, graph: str, node: str, key: str) -> Column:
    """The column to sort by; refuses an unknown one and one redacted for ``user`` (the order would leak it)."""
    columns = {c.key: c for c in gate_columns(user=user, graph=graph, node=node)}
    if key not in columns:
        raise InvalidInput(_unknown_column(key, node, columns, "sort by"), field="sort")
    return _checked(columns[key], masked_paths(user, graph), "sort")
