"""Event types' names and JSON Schemas (draft 2020-12): checked, compiled,
asked about one payload, and turned into an example for people.

Pure: no I/O, no clock. The schemas are written by tenants and run on the
API's event loop, so every regular expression in them runs under RE2
(linear time), never Python's backtracking `re`: `pattern`,
`patternProperties` and the `additionalProperties` that consults it are
replaced below, and the one keyword jsonschema would still send through `re`
(`unevaluatedProperties` beside `patternProperties`) is refused at check
time. A `$ref` is resolved only inside the schema itself: jsonschema's
registry fetches nothing over the network.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from typing import Any

import re2
from jsonschema import Draft202012Validator, exceptions, validators
from jsonschema.protocols import Validator as Validator  # re-exported: ops types its cache
from referencing.exceptions import Unresolvable

from dispatcher.core.errors import BadInput

_NAME = re.compile(r"[A-Za-z0-9_.-]{1,256}")
DRAFT = "https://json-schema.org/draft/2020-12/schema"
DETAIL_CHARS = 200  # of a validator's message: one line, even for a big value

_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False
_RE2_OPTIONS.max_mem = 8 << 20


def check_name(value: Any) -> str:
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise BadInput("event type name must be 1-256 characters of A-Z, a-z, 0-9, _, . and -")
    return value


@functools.lru_cache(maxsize=1024)  # compiled once per pattern, not per payload
def _re2(pattern: str) -> Any:
    try:
        return re2.compile(pattern, _RE2_OPTIONS)
    except re2.error:
        raise BadInput(
            f"schema pattern {pattern[:80]!r} is not RE2 syntax (no lookaround or backreferences)"
        ) from None


# Keywords whose values are data, not schemas: a "pattern" inside is not one.
_DATA = frozenset({"const", "enum", "examples", "default"})


MAX_DEPTH = 64  # of a schema's nesting: deeper would overflow jsonschema's recursion


def _walk(schema: Any) -> Iterator[tuple[str, Any]]:
    """Every (keyword, value) of a schema, breadth first; BadInput past
    MAX_DEPTH (iterative, so a deep document cannot overflow this either)."""
    level: list[Any] = [schema]
    for _ in range(MAX_DEPTH):
        below: list[Any] = []
        for node in level:
            if isinstance(node, dict):
                for key, value in node.items():
                    yield key, value
                    if key not in _DATA:
                        below.append(value)
            elif isinstance(node, list):
                below.extend(node)
        if not below:
            return
        level = below
    raise BadInput(f"schema is nested more than {MAX_DEPTH} levels deep")


def check_schema(schema: Any) -> dict[str, Any]:
    """A schema an event type may hold: a draft 2020-12 schema object whose
    patterns RE2 compiles; else BadInput naming where it is wrong."""
    if not isinstance(schema, dict):
        raise BadInput("schema must be a JSON object (a draft 2020-12 JSON Schema)")
    declared = schema.get("$schema", DRAFT)
    if not isinstance(declared, str) or declared.rstrip("#") != DRAFT:
        raise BadInput(f"schema must be draft 2020-12 ($schema {DRAFT})")
    keywords = set()
    for key, value in _walk(schema):
        keywords.add(key)
        if key == "pattern" and isinstance(value, str):
            _re2(value)
        elif key == "patternProperties" and isinstance(value, dict):
            for pattern in value:
                _re2(pattern)
    if {"patternProperties", "unevaluatedProperties"} <= keywords:
        raise BadInput("schema may not use patternProperties together with unevaluatedProperties")
    try:
        Draft202012Validator.check_schema(schema)
    except exceptions.SchemaError as exc:
        where = f"{exc.json_path}: {_line(exc.message)}"
        raise BadInput(f"schema is not a valid draft 2020-12 JSON Schema at {where}") from None
    return schema


def _line(text: str) -> str:
    one = " ".join(text.split())
    return one if len(one) <= DETAIL_CHARS else one[: DETAIL_CHARS - 1] + "…"


# ---------------------------------------------------------------- RE2 keywords


def _pattern(validator: Any, patrn: str, instance: Any, schema: Any) -> Iterator[Any]:
    if validator.is_type(instance, "string") and _re2(patrn).search(instance) is None:
        yield exceptions.ValidationError(f"{instance!r} does not match {patrn!r}")


def _pattern_properties(validator: Any, pp: dict[str, Any], instance: Any, _: Any) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    for patrn, subschema in pp.items():
        matcher = _re2(patrn)
        for key, value in instance.items():
            if matcher.search(key) is not None:
                yield from validator.descend(value, subschema, path=key, schema_path=patrn)


def _additional_properties(validator: Any, ap: Any, instance: Any, schema: Any) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    named = schema.get("properties", {})
    matchers = [_re2(p) for p in schema.get("patternProperties", {})]
    extras = sorted(
        (k for k in instance if k not in named and not any(m.search(k) for m in matchers)), key=str
    )
    if validator.is_type(ap, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], ap, path=extra)
    elif not ap and extras:
        yield exceptions.ValidationError(
            f"additional properties are not allowed ({', '.join(map(repr, extras))})"
        )


SchemaValidator = validators.extend(
    Draft202012Validator,
    {
        "pattern": _pattern,
        "patternProperties": _pattern_properties,
        "additionalProperties": _additional_properties,
    },
)


def compile_schema(schema: dict[str, Any]) -> Validator:
    validator: Validator = SchemaValidator(schema)
    return validator


def first_error(validator: Validator, instance: Any) -> str | None:
    """Where and why `instance` fails (`$.amount: 'x' is not of type
    'number'`), the most relevant error as jsonschema ranks them; None if
    it passes."""
    try:
        error = exceptions.best_match(validator.iter_errors(instance))
    except Unresolvable as exc:
        return f"$: the schema's $ref {_line(str(exc.ref))} cannot be resolved"
    except RecursionError:  # a recursive $ref followed down a deeply nested payload
        return "$: the payload is nested too deeply to check"
    if error is None:
        return None
    return f"{error.json_path}: {_line(error.message)}"


# ---------------------------------------------------------------- examples


def example_of(schema: Any, depth: int = 0) -> Any:
    """A payload to show beside a type when subscribing: the schema's own
    `examples[0]`, else one made from `const`, `default`, `enum` and the
    properties' types. A hint for people, not guaranteed to validate."""
    if not isinstance(schema, dict) or depth > 8:
        return None
    for key in ("examples", "enum"):
        if isinstance(schema.get(key), list) and schema[key]:
            return schema[key][0]
    for key in ("const", "default"):
        if key in schema:
            return schema[key]
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), None)
    props = schema.get("properties")
    if kind == "object" or (kind is None and isinstance(props, dict)):
        props = props if isinstance(props, dict) else {}
        return {name: example_of(sub, depth + 1) for name, sub in props.items()}
    if kind == "array":
        item = example_of(schema.get("items"), depth + 1)
        return [] if item is None else [item]
    return _SCALARS.get(kind) if isinstance(kind, str) else None


_SCALARS: dict[str, Any] = {"string": "string", "integer": 0, "number": 0, "boolean": True}
