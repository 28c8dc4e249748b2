"""JSON Schemas that answers are checked against: applicable as they stand, and never fetched.

A schema comes from an engine (an external task's ``response_schema``) or from a graph's gate
(``interrupt(value, response_schema=...)``). Left to itself, jsonschema downloads a ``$ref`` it
does not hold (a request from inside our network to any URL a schema names) and raises in the
middle of validation when a reference points nowhere. So a schema applies only when it is valid
for its draft and every reference resolves inside the schema itself (or to a bundled draft
metaschema), and validators are built over a registry that cannot retrieve anything.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import jsonschema
import jsonschema.exceptions
import jsonschema.validators
import referencing
import referencing.exceptions
import referencing.jsonschema
from jsonschema.protocols import Validator
from jsonschema_specifications import REGISTRY as METASCHEMAS

if TYPE_CHECKING:
    from referencing._core import Resolver  # not re-exported by the package, only for typing

_REFERENCE_KEYWORDS = ("$ref", "$dynamicRef", "$recursiveRef")


def schema_problem(schema: Any) -> str | None:
    """Why ``schema`` cannot be applied, or None when it can."""
    if isinstance(schema, bool):
        return None
    if not isinstance(schema, dict):
        return "a JSON schema is an object"
    dialect = schema.get("$schema")
    if dialect is not None:
        # An unknown draft would be validated as the latest one, with a warning that it will fail later.
        try:
            referencing.jsonschema.specification_with(dialect if isinstance(dialect, str) else "")
        except referencing.jsonschema.UnknownDialect:
            return f"unknown $schema {dialect!r}: omit it or name a JSON Schema draft"
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        return f"not a valid JSON schema: {exc.message}"
    except RecursionError:  # a graph's schema is not depth-checked as request JSON is
        return "the schema is nested too deeply to check"
    return _reference_problem(schema)


def schema_validator_build(schema: Any) -> Validator:
    """A validator for a schema ``schema_problem`` accepted; it resolves references without fetching."""
    cls = jsonschema.validators.validator_for(schema)
    validator: Validator = cls(schema, registry=METASCHEMAS)
    return validator


class SchemaUnusable(Exception):
    """Validation met what ``schema_problem`` should have refused (a reference it could not follow)."""


def first_error(validator: Validator, value: Any) -> jsonschema.ValidationError | None:
    """The most relevant error of ``value`` (the one ``jsonschema.validate`` raises), or None."""
    try:
        return jsonschema.exceptions.best_match(validator.iter_errors(value))
    except referencing.exceptions.Unresolvable as exc:
        raise SchemaUnusable(f"a reference does not resolve inside the schema: {exc}") from None
    except RecursionError:
        # A reference loop schema_problem did not see (a schema from before it looked for them).
        raise SchemaUnusable("its references nest too deeply, or loop without reading deeper into the answer") from None


def _reference_problem(schema: dict[str, Any]) -> str | None:
    resource = referencing.Resource.from_contents(schema, default_specification=referencing.jsonschema.DRAFT202012)
    base = resource.id() or ""
    registry: referencing.Registry[Any] = METASCHEMAS.with_resource(base, resource).crawl()
    specification = referencing.jsonschema.specification_with(
        str(schema.get("$schema", "")), default=referencing.jsonschema.DRAFT202012
    )
    return _walk(resource, registry.resolver(base_uri=base), specification)


def _walk(
    resource: referencing.Resource[Any], resolver: Resolver[Any], specification: referencing.Specification[Any]
) -> str | None:
    # Subresources are the places a draft reads subschemas from; each may change the base URI ($id).
    # Iterative: a schema nested (or chained through $defs) deeply must not exhaust our own stack.
    pending = [(resource, resolver)]
    finished: set[int] = set()
    while pending:
        here, at = pending.pop()
        contents = here.contents
        if isinstance(contents, dict):
            for keyword in _REFERENCE_KEYWORDS:
                reference = contents.get(keyword)
                if isinstance(reference, str):
                    try:
                        at.lookup(reference)
                    except referencing.exceptions.Unresolvable:
                        return f"{keyword} {reference!r} does not resolve inside the schema (nothing is fetched)"
            loop = _loop_from(here, at, specification, finished)
            if loop is not None:
                return loop
        pending.extend((sub, at.in_subresource(sub)) for sub in here.subresources())
    return None


# Keywords that apply a subschema to the same instance (not to a property or item of it): following
# only these, a schema that reaches itself again never ends (jsonschema recurses until RecursionError).
_IN_PLACE_LISTS = ("allOf", "anyOf", "oneOf", "extends")
_IN_PLACE_ONE = ("not", "if", "then", "else")
_IN_PLACE_MAPS = ("dependentSchemas", "dependencies")


def _in_place(contents: dict[str, Any]) -> list[Any]:
    out: list[Any] = []
    for keyword in _IN_PLACE_LISTS:
        value = contents.get(keyword)
        if isinstance(value, list):
            out.extend(value)
        elif isinstance(value, dict):  # draft 3's extends may be one schema
            out.append(value)
    out.extend(contents[keyword] for keyword in _IN_PLACE_ONE if keyword in contents)
    for keyword in _IN_PLACE_MAPS:
        value = contents.get(keyword)
        if isinstance(value, dict):
            out.extend(v for v in value.values() if isinstance(v, dict))
    return [v for v in out if isinstance(v, dict)]


def _loop_from(
    start: referencing.Resource[Any],
    resolver: Resolver[Any],
    specification: referencing.Specification[Any],
    finished: set[int],
) -> str | None:
    """A loop of references and in-place keywords from ``start`` back into itself, described, or None.

    Depth-first over the subschemas that apply to the same instance; ``finished`` holds the
    subschemas (by identity) already shown to reach no loop, shared across starts.
    """
    if id(start.contents) in finished:
        return None
    on_path: set[int] = {id(start.contents)}
    path: list[tuple[Any, list[tuple[Any, Resolver[Any], str]]]] = []

    def edges(contents: dict[str, Any], at: Resolver[Any]) -> list[tuple[Any, Resolver[Any], str]]:
        out: list[tuple[Any, Resolver[Any], str]] = []
        for keyword in _REFERENCE_KEYWORDS:
            reference = contents.get(keyword)
            if isinstance(reference, str):
                try:
                    resolved = at.lookup(reference)
                except referencing.exceptions.Unresolvable:
                    continue  # reported by the reference walk
                out.append((resolved.contents, resolved.resolver, f"{keyword} {reference!r}"))
        for child in _in_place(contents):
            sub = specification.create_resource(child)
            out.append((child, at.in_subresource(sub), ""))
        return out

    path.append((start.contents, edges(start.contents, resolver)))
    while path:
        contents, todo = path[-1]
        if not todo:
            path.pop()
            on_path.discard(id(contents))
            finished.add(id(contents))
            continue
        child, child_at, via = todo.pop()
        if not isinstance(child, dict) or id(child) in finished:
            continue
        if id(child) in on_path:
            where = f" ({via})" if via else ""
            return f"its references loop{where}: the schema would apply itself to the same value forever"
        on_path.add(id(child))
        path.append((child, edges(child, child_at)))
    return None
