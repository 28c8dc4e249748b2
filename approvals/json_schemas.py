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


def _reference_problem(schema: dict[str, Any]) -> str | None:
    resource = referencing.Resource.from_contents(schema, default_specification=referencing.jsonschema.DRAFT202012)
    base = resource.id() or ""
    registry: referencing.Registry[Any] = METASCHEMAS.with_resource(base, resource).crawl()
    return _walk(resource, registry.resolver(base_uri=base))


def _walk(resource: referencing.Resource[Any], resolver: Resolver[Any]) -> str | None:
    # Subresources are the places a draft reads subschemas from; each may change the base URI ($id).
    contents = resource.contents
    if isinstance(contents, dict):
        for keyword in _REFERENCE_KEYWORDS:
            reference = contents.get(keyword)
            if isinstance(reference, str):
                try:
                    resolver.lookup(reference)
                except referencing.exceptions.Unresolvable:
                    return f"{keyword} {reference!r} does not resolve inside the schema (nothing is fetched)"
    for sub in resource.subresources():
        problem = _walk(sub, resolver.in_subresource(sub))
        if problem is not None:
            return problem
    return None
