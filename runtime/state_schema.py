"""A graph's state schema: its fields, thread input and state edits validated against it, its JSON Schema.

State schemas are TypedDicts, dataclasses or Pydantic models. Each key is
validated on its own (``typing.TypedDict`` on Python 3.11 is not accepted
whole by Pydantic) in *strict JSON mode*: numbers stay numbers, booleans stay
booleans, and an unknown key is an error naming the field.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from functools import lru_cache
from typing import Any

import typing_extensions
from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError


class FieldError(ValueError):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def schema_fields(schema: type) -> dict[str, Any]:
    """Key → type annotation for a TypedDict, dataclass or Pydantic state schema."""
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        return {name: f.annotation for name, f in schema.model_fields.items()}
    if dataclasses.is_dataclass(schema):
        return {f.name: f.type for f in dataclasses.fields(schema)}
    try:
        hints = typing.get_type_hints(schema, include_extras=True)
    except Exception:  # noqa: BLE001 - unresolvable hints fall back to raw annotations
        return dict(getattr(schema, "__annotations__", {}))
    # A key's Required/NotRequired says whether it must be there, not what it holds: the value's type is
    # inside (left wrapped, the key's value went unchecked: pydantic adapts no bare NotRequired).
    return {key: _presence(hint)[0] for key, hint in hints.items()}


_REQUIRED = (typing.Required, typing_extensions.Required)
_NOT_REQUIRED = (typing.NotRequired, typing_extensions.NotRequired)


def _presence(hint: Any) -> tuple[Any, bool | None]:
    """``(the value's type, whether the key is Required (True), NotRequired (False) or says neither)``."""
    origin = typing.get_origin(hint)
    if origin in _REQUIRED or origin in _NOT_REQUIRED:
        return typing.get_args(hint)[0], origin in _REQUIRED
    return hint, None


def required_keys(schema: type) -> list[str]:
    """The keys a whole value of ``schema`` must hold, in declaration order (``total=False`` / ``NotRequired``
    TypedDict keys, Pydantic fields with defaults and dataclass fields with defaults are optional)."""
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        return [name for name, f in schema.model_fields.items() if f.is_required()]
    if dataclasses.is_dataclass(schema):
        missing = dataclasses.MISSING
        return [f.name for f in dataclasses.fields(schema) if f.default is missing and f.default_factory is missing]
    required = getattr(schema, "__required_keys__", None)
    if required is None:
        return []
    try:
        hints = typing.get_type_hints(schema, include_extras=True)
    except Exception:  # noqa: BLE001 - unresolvable hints: the class's own account
        hints = dict(getattr(schema, "__annotations__", {}))
    # typing.TypedDict on Python 3.11 misses NotRequired[...] under ``from __future__ import annotations``
    # (its __required_keys__ lists the key): the resolved hint is the key's own word.
    out = []
    for key, hint in hints.items():
        marked = _presence(hint)[1]
        if marked or (marked is None and key in required):
            out.append(key)
    return out


def values_validate(
    schema: type,
    values: Any,
    *,
    prefix: str,
    allowed: typing.Collection[str] | None = None,
    complete: bool = False,
) -> dict[str, Any]:
    """Return ``values`` if every key exists in ``schema`` (and in ``allowed``) with a valid value.

    ``complete``: ``values`` is a whole value of the schema (a thread's input), so its required keys must be
    there too; edits and forks write some keys over a state that has the rest.
    """
    if not isinstance(values, dict):
        raise FieldError(prefix, "must be an object")
    fields = schema_fields(schema)
    for key, value in values.items():
        field = f"{prefix}.{key}"
        if key not in fields:
            known = ", ".join(sorted(fields)) or "none"
            holder = "the graph's input" if prefix == "input" else "the state"  # a graph may take less than it holds
            raise FieldError(field, f"unknown field ({holder} has: {known})")
        if allowed is not None and key not in allowed:
            raise FieldError(field, f"this gate does not allow editing it (editable: {', '.join(allowed) or 'none'})")
        adapter = _adapter(fields[key])
        if adapter is None:
            continue
        try:
            adapter.validate_json(json.dumps(value), strict=True)
        except ValidationError as exc:
            err = exc.errors()[0]
            loc = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err["loc"])
            raise FieldError(f"{field}{loc}", field_message(key + loc, err)) from None
    if complete:  # after the keys given, so a misspelt key is named as such rather than as a missing one
        missing = [key for key in required_keys(schema) if key not in values]
        if missing:
            raise FieldError(f"{prefix}.{missing[0]}", f"required (missing: {', '.join(missing)})")
    return values


# Pydantic's words for a refused value ("Input should be greater than or equal to 1") as a reviewer reads
# them, naming the value: "Amount must be at least 1". Shown next to the input (console) and in the API's
# error message, whose ``field`` names the path exactly.
_SAID = {
    "greater_than_equal": "must be at least {ge}",
    "less_than_equal": "must be at most {le}",
    "greater_than": "must be more than {gt}",
    "less_than": "must be less than {lt}",
    "multiple_of": "must be a multiple of {multiple_of}",
    "int_type": "must be an integer (a whole number)",
    "int_parsing": "must be an integer (a whole number)",
    "int_from_float": "must be an integer (a whole number)",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "finite_number": "must be a finite number",
    "string_type": "must be text",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "list_type": "must be a list",
    "dict_type": "must be an object",
    "model_type": "must be an object",
    "literal_error": "must be {expected}",
    "enum": "must be {expected}",
    "string_too_short": "must be at least {min_length} characters",
    "string_too_long": "must be at most {max_length} characters",
    "too_short": "must have at least {min_length} items",
    "too_long": "must have at most {max_length} items",
    "string_pattern_mismatch": "must match {pattern}",
    "missing": "is required",
    "extra_forbidden": "is not a field it has",
}


def field_message(path: str, err: Any) -> str:
    """``err`` (one of a ``ValidationError``'s ``errors()``) in words naming ``path`` ("term_months", "person.age")."""
    said = _SAID.get(err.get("type", ""))
    try:
        text = said.format(**(err.get("ctx") or {})) if said else ""
    except (KeyError, IndexError):
        text = ""
    if not text:  # a rule without words of ours: Pydantic's, made to name the value
        msg = str(err.get("msg", "is not valid"))
        for opening in ("Input should", "Value should", "String should", "List should", "Dictionary should"):
            if msg.startswith(opening):
                msg = "must" + msg[len(opening) :]
                break
        text = msg[:1].lower() + msg[1:]
    label = path.replace("_", " ")
    return f"{label[:1].upper()}{label[1:]} {text}"


def json_schema_for(schema: type) -> dict[str, Any]:
    """A JSON Schema describing the state, built per key (unsupported keys become free-form)."""
    properties: dict[str, Any] = {}
    for key, annotation in schema_fields(schema).items():
        adapter = _adapter(annotation)
        try:
            properties[key] = adapter.json_schema() if adapter else {}
        except Exception:  # noqa: BLE001 - a type without a JSON schema gets an open one
            properties[key] = {}
    return {"type": "object", "properties": properties, "additionalProperties": False}


def _adapter(annotation: Any) -> TypeAdapter[Any] | None:
    try:
        return _adapter_cached(annotation)
    except TypeError:  # unhashable Annotated metadata (e.g. LangChain's OmitFromSchema)
        return _adapter_build(annotation)


@lru_cache(maxsize=512)
def _adapter_cached(annotation: Any) -> TypeAdapter[Any] | None:
    return _adapter_build(annotation)


def _adapter_build(annotation: Any) -> TypeAdapter[Any] | None:
    # Reducers such as add_messages take loose input (role dicts, tuples);
    # they validate it themselves, so we do not second-guess them.
    for meta in getattr(annotation, "__metadata__", ()):
        if getattr(meta, "__name__", "") in {"add_messages", "_add_messages"}:
            return None
    try:
        return TypeAdapter(_compatible(annotation))
    except Exception:  # noqa: BLE001 - a type pydantic cannot adapt is left unchecked
        return None


def _is_typed_dict(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, dict) and hasattr(tp, "__total__") and hasattr(tp, "__annotations__")


def _compatible(annotation: Any) -> Any:
    """Rebuild ``typing.TypedDict`` types (at any depth) as ``typing_extensions`` ones.

    Pydantic refuses ``typing.TypedDict`` on Python < 3.12, and most LangGraph
    states are written with it.
    """
    if _is_typed_dict(annotation) and not getattr(annotation, "__pydantic_config__", None):
        hints = typing.get_type_hints(annotation, include_extras=True)
        required = getattr(annotation, "__required_keys__", set(hints))
        fields = {
            key: _compatible(hint) if key in required else typing_extensions.NotRequired[_compatible(hint)]
            for key, hint in hints.items()
        }
        rebuilt_td: Any = typing_extensions.TypedDict(annotation.__name__, fields)  # type: ignore[misc]
        setattr(rebuilt_td, "__pydantic_config__", ConfigDict(extra="forbid"))  # noqa: B010 - unknown keys refused
        return rebuilt_td
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is None or not args:
        return annotation
    if origin is typing.Annotated:
        return typing.Annotated[(_compatible(args[0]), *annotation.__metadata__)]
    if origin is typing.Literal:
        return annotation
    rebuilt = tuple(_compatible(a) for a in args)
    if rebuilt == args:
        return annotation
    if origin is typing.Union or isinstance(annotation, types.UnionType):
        return typing.Union[rebuilt]  # noqa: UP007
    try:
        return annotation.copy_with(rebuilt) if hasattr(annotation, "copy_with") else origin[rebuilt]
    except TypeError:
        return annotation
