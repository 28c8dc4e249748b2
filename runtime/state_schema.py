"""A graph's state schema: its fields, thread input and state edits validated against it, its JSON Schema.

State schemas are TypedDicts, dataclasses or Pydantic models (or Pydantic
dataclasses). Each key is validated on its own (``typing.TypedDict`` on Python
3.11 is not accepted whole by Pydantic) in *strict JSON mode*: numbers stay
numbers, booleans stay booleans, and an unknown key is an error naming the field.
A key's type carries what its declaration says about its values (``Annotated``
metadata, a Pydantic ``Field(gt=0, ...)``), so bounds are checked here too:
LangGraph itself only checks a Pydantic state when a node reads it, after the
write was accepted. A Pydantic schema's ``@field_validator`` /
``@model_validator`` methods run too (``_validators_run``): on a whole value
(a thread's input) as the model validates it, on a write of some keys as an
assignment of each to the state it lands on (``current``), so a validator
that needs a value the state does not hold is not run rather than refusing
what it cannot judge.
"""

from __future__ import annotations

import dataclasses
import json
import re
import types
import typing
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import typing_extensions
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo


class FieldError(ValueError):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def schema_fields(schema: type) -> dict[str, Any]:
    """Key → type annotation for a TypedDict, dataclass or Pydantic state schema (a Pydantic field's with what
    its ``Field()`` says, as ``Annotated`` metadata)."""
    if pydantic_fields(schema) is not None:
        return dict(_field_types(schema))
    if dataclasses.is_dataclass(schema):
        # Resolved hints: under ``from __future__ import annotations`` a field's ``type`` is a string, which
        # left an ``Annotated[int, Field(ge=1)]`` key unchecked.
        resolved = _hints(schema)
        return {f.name: resolved.get(f.name, f.type) for f in dataclasses.fields(schema)}
    try:
        hints = typing.get_type_hints(schema, include_extras=True)
    except Exception:  # noqa: BLE001 - unresolvable hints fall back to raw annotations
        return dict(getattr(schema, "__annotations__", {}))
    # A key's Required/NotRequired says whether it must be there, not what it holds: the value's type is
    # inside (left wrapped, the key's value went unchecked: pydantic adapts no bare NotRequired).
    return {key: _presence(hint)[0] for key, hint in hints.items()}


def pydantic_fields(schema: Any) -> dict[str, FieldInfo] | None:
    """A Pydantic model's or Pydantic dataclass's fields (None for any other schema)."""
    if not isinstance(schema, type):
        return None
    if issubclass(schema, BaseModel):
        return schema.model_fields
    fields = getattr(schema, "__pydantic_fields__", None)
    return fields if dataclasses.is_dataclass(schema) and isinstance(fields, dict) else None


@lru_cache(maxsize=256)
def _field_types(schema: type) -> tuple[tuple[str, Any], ...]:
    """Each field of a Pydantic schema as ``Annotated[type, *constraints, Field(what describes it)]``.

    ``FieldInfo.annotation`` is the bare type: Pydantic moves ``Field(gt=0, le=100_000)`` (and ``Annotated``
    metadata: validators, LangGraph reducers) into ``metadata``, so the bare type let ``amount: -5`` through
    every write and a run then failed in LangGraph's own validation. Aliases are left out: LangGraph keys a
    state's channels by attribute name. Cached per schema so the same annotation reaches ``_adapter``'s cache.
    """
    out = []
    for name, info in (pydantic_fields(schema) or {}).items():
        described = Field(
            default=info.default,
            title=info.title,
            description=info.description,
            examples=info.examples,
            json_schema_extra=info.json_schema_extra,
            discriminator=info.discriminator,
        )
        out.append((name, typing.Annotated[(info.annotation, *info.metadata, described)]))
    return tuple(out)


def _hints(schema: type) -> dict[str, Any]:
    try:
        return typing.get_type_hints(schema, include_extras=True)
    except Exception:  # noqa: BLE001 - unresolvable hints: the raw annotations
        return dict(getattr(schema, "__annotations__", {}))


_REQUIRED = (typing.Required, typing_extensions.Required)
_NOT_REQUIRED = (typing.NotRequired, typing_extensions.NotRequired)


def _presence(hint: Any) -> tuple[Any, bool | None]:
    """``(the value's type, whether the key is Required (True), NotRequired (False) or says neither)``."""
    origin = typing.get_origin(hint)
    if origin in _REQUIRED or origin in _NOT_REQUIRED:
        return typing.get_args(hint)[0], origin in _REQUIRED
    return hint, None


_MARKED_REQUIRED = re.compile(r"^\s*(?:[A-Za-z_][\w.]*\.)?Required\[")


def keys_marked_required(schema: type) -> list[str]:
    """The keys of a TypedDict (and its bases) whose annotation is ``Required[...]``, in declaration order.

    Under ``from __future__ import annotations`` (as the demo graphs are written) the annotations are strings,
    which Python 3.11's TypedDict keeps as ``ForwardRef('Required[str]')``: read as they are, no key was
    required. The resolved hints say it; where they cannot be resolved (a name the module does not hold
    any more), the annotation's text does."""
    hints = _hints(schema)
    out = []
    for key, hint in hints.items():
        text = hint.__forward_arg__ if isinstance(hint, typing.ForwardRef) else hint
        if _presence(hint)[1] or (isinstance(text, str) and _MARKED_REQUIRED.match(text)):
            out.append(key)
    return out


def required_keys(schema: type) -> list[str]:
    """The keys a whole value of ``schema`` must hold, in declaration order (``total=False`` / ``NotRequired``
    TypedDict keys, Pydantic fields with defaults and dataclass fields with defaults are optional)."""
    declared = pydantic_fields(schema)
    if declared is not None:  # a Pydantic dataclass's ``x: int = Field(gt=0)`` has a default: the Field
        return [name for name, f in declared.items() if f.is_required()]
    if dataclasses.is_dataclass(schema):
        missing = dataclasses.MISSING
        return [f.name for f in dataclasses.fields(schema) if f.default is missing and f.default_factory is missing]
    required = getattr(schema, "__required_keys__", None)
    if required is None:
        return []
    hints = _hints(schema)
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
    current: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Return ``values`` if every key exists in ``schema`` (and in ``allowed``) with a valid value.

    ``complete``: ``values`` is a whole value of the schema (a thread's input), so its required keys must be
    there too; edits and forks write some keys over a state that has the rest. ``current``: that state's
    values as stored, which a Pydantic schema's validators read along with the keys written (without it,
    a validator that reads a key not written is not run).
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
    if values:
        _validators_run(schema, values, prefix=prefix, complete=complete, current=current)
    return values


def _validators_run(
    schema: type, values: dict[str, Any], *, prefix: str, complete: bool, current: Mapping[str, Any] | None
) -> None:
    """Run a Pydantic schema's validators on what ``values`` makes of the state; a refusal is a ``FieldError``.

    A whole value is validated as the model validates it. Keys written over a state are assigned, each
    after all of them are in place, to an instance holding ``current`` (with the schema's defaults where it
    holds nothing, as a node loading it would see) or, without ``current``, only the keys written: Pydantic's
    ``validate_assignment`` runs the key's field validators and the model's validators. A state's stored
    values are often partial: a validator reading a key the instance does not have (an ``AttributeError``,
    a ``KeyError``...) is not run rather than refusing a write it cannot judge; ``model_validate`` on a
    partial dict would refuse every key missing, and ``model_construct`` fills keys with defaults
    that are not the stored values.
    """
    fields = pydantic_fields(schema)
    validator = getattr(schema, "__pydantic_validator__", None)
    if fields is None or validator is None or not has_validators(schema):
        return  # bounds and types were checked key by key; nothing else would run
    try:
        if complete:
            validator.validate_python(values)
            return
        instance = _instance_over(schema, fields, values, current)
        for key, value in values.items():
            validator.validate_assignment(instance, key, value)
    except ValidationError as exc:
        errors = [e for e in exc.errors() if e.get("type") not in _NOT_JUDGED]
        if not errors:
            return
        err = errors[0]
        loc = tuple(err["loc"])
        if loc:
            path = f"{loc[0]}" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc[1:])
            raise FieldError(f"{prefix}.{path}", field_message(path, err)) from None
        if not complete and (_Absent.held_by(instance) or _refused_before(schema, fields, validator, current)):
            return  # the model's validator read a value the state does not hold, or refuses the state as stored
        # The model's own validator refused the combination: named by the key written, if one was.
        written = next(iter(values)) if len(values) == 1 and not complete else None
        field = f"{prefix}.{written}" if written else prefix
        raise FieldError(field, field_message(written or "state", err)) from None
    except Exception:  # noqa: BLE001 - a validator that cannot judge this partial state; LangGraph will
        return


def _refused_before(
    schema: type, fields: dict[str, FieldInfo], validator: Any, current: Mapping[str, Any] | None
) -> bool:
    """Do the model's validators refuse the state as stored, before the write? Then the write is not why."""
    if not current:
        return False
    instance = _instance_over(schema, fields, {}, current)
    key = next(iter(current.keys() & fields.keys()), None)
    if key is None:
        return False
    try:
        validator.validate_assignment(instance, key, current[key])
    except ValidationError:
        return True
    except Exception:  # noqa: BLE001 - cannot judge it either
        return False
    return False


class _Absent:
    """A pydantic dataclass's field the state holds no value for: its assignment validation reads every field,
    so the instance needs one; any use of it raises, so a validator reading it is not run."""

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError("no value stored")

    __eq__ = __lt__ = __le__ = __gt__ = __ge__ = __bool__ = __len__ = __iter__ = __getattr__ = _refuse
    __hash__ = None  # type: ignore[assignment]

    @staticmethod
    def held_by(instance: Any) -> bool:
        return any(isinstance(v, _Absent) for v in vars(instance).values())


# Refusals that are not the value's: an instance that refuses any assignment (frozen) says nothing of it.
_NOT_JUDGED = {"frozen_instance", "frozen_field"}


def has_validators(schema: type) -> bool:
    """Whether a Pydantic schema has field or model validators (what ``current=`` of ``values_validate`` is for)."""
    decorators = getattr(schema, "__pydantic_decorators__", None)
    if decorators is None:
        return False
    return bool(decorators.field_validators or decorators.model_validators or decorators.root_validators)


def _instance_over(
    schema: type, fields: dict[str, FieldInfo], values: dict[str, Any], current: Mapping[str, Any] | None
) -> Any:
    """An instance of ``schema`` holding the state ``values`` are written over, and ``values`` (not yet validated:
    each is then assigned), built without validation; keys it has no value for are absent, not defaulted."""
    held: dict[str, Any] = {}
    if current is not None:
        for name, info in fields.items():
            if name in current:
                held[name] = current[name]
            elif not info.is_required():
                held[name] = info.get_default(call_default_factory=True)
    held.update(values)
    instance: Any = object.__new__(schema)
    if issubclass(schema, BaseModel):  # a field it has no value for is absent: reading it raises
        object.__setattr__(instance, "__dict__", held)
        object.__setattr__(instance, "__pydantic_fields_set__", set(held))
        object.__setattr__(instance, "__pydantic_extra__", None)
        object.__setattr__(instance, "__pydantic_private__", None)
    else:
        object.__setattr__(instance, "__dict__", {name: held.get(name, _Absent()) for name in fields})
    return instance


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
    if err.get("type") in ("value_error", "assertion_error"):  # a validator's own words
        words = str(err.get("msg", "")).removeprefix("Value error, ").removeprefix("Assertion failed, ")
        label = path.replace("_", " ")
        return f"{label[:1].upper()}{label[1:]}: {words}"
    said = _SAID.get(err.get("type", ""))
    # A float field's bound comes as a float: "must be more than 0", not "more than 0.0".
    ctx = {k: int(v) if isinstance(v, float) and v.is_integer() else v for k, v in (err.get("ctx") or {}).items()}
    try:
        text = said.format(**ctx) if said else ""
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
    """A JSON Schema describing the state, built per key (unsupported keys become free-form).

    The definitions a key's schema refers to (a nested model or TypedDict: ``{"$ref": "#/$defs/Inner"}``)
    are the document's ``$defs``, where such a reference points (a key whose definitions clash by name
    with another key's keeps its own).
    """
    properties: dict[str, Any] = {}
    defs: dict[str, Any] = {}
    for key, annotation in schema_fields(schema).items():
        adapter = _adapter(annotation)
        try:
            prop = adapter.json_schema() if adapter else {}
        except Exception:  # noqa: BLE001 - a type without a JSON schema gets an open one
            prop = {}
        own = prop.get("$defs") or {}
        if own and all(defs.get(name, d) == d for name, d in own.items()):
            defs.update(own)
            prop = {k: v for k, v in prop.items() if k != "$defs"}
        properties[key] = prop
    out: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False}
    if defs:
        out["$defs"] = defs
    return out


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
