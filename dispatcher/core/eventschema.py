"""Event types' names and JSON Schemas (draft 2020-12): checked, compiled,
asked about one payload, and turned into an example for people.

Pure: no I/O, no clock. The schemas are written by tenants and run on the
API's event loop, so every regular expression in them runs under RE2
(linear time), never Python's backtracking `re`: `pattern`,
`patternProperties` and the `additionalProperties` that consults it are
replaced below, and the one keyword jsonschema would still send through `re`
(`unevaluatedProperties` beside `patternProperties`) is refused at check
time.

Nothing a schema says reaches outside it: a `$ref` or `$dynamicRef` that is
not a fragment of the schema itself (`#…`) is refused at check time, and
the validator is built on an empty registry that retrieves nothing, so a
reference that gets past the check is merely unresolvable (a 422), never a
fetch. Nothing a schema says runs unbounded either: a schema is at most
MAX_SCHEMA_BYTES, and every check runs against a `Budget` of keyword steps
(and, where the caller passes a clock, a deadline), charged per keyword
call and by the size of the work in `enum`, `const` and `uniqueItems`;
past it the check stops with `OverBudget`. `uniqueItems` is linear (a hash
of each item's canonical form) instead of jsonschema's quadratic fallback,
and neither it nor `enum` copies the instance or the enum into its message.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import orjson
import re2
from jsonschema import Draft202012Validator, exceptions, validators
from jsonschema._utils import equal as _equal  # JSON Schema's equality (1 == 1.0, true != 1)
from jsonschema.protocols import Validator as Validator  # re-exported: ops types its cache
from referencing import Registry
from referencing.exceptions import Unresolvable

from dispatcher.core.errors import BadInput

_NAME = re.compile(r"[A-Za-z0-9_.-]{1,256}")
DRAFT = "https://json-schema.org/draft/2020-12/schema"
DETAIL_CHARS = 200  # of a validator's message: one line, even for a big value
MAX_SCHEMA_BYTES = 64 * 1024  # of one schema as compact JSON (SPEC "Limits")

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


def check_schema(schema: Any, budget: Budget | None = None) -> dict[str, Any]:
    """A schema an event type may hold: a draft 2020-12 schema object of at
    most MAX_SCHEMA_BYTES whose patterns RE2 compiles and whose references
    stay inside it; else BadInput naming where it is wrong. The metaschema
    check is the costly part (about 0.8 s at MAX_SCHEMA_BYTES): `budget`
    reaches only its first levels (see _MetaValidator), so what bounds it
    is the size cap; a schema that exhausts the budget is refused as too
    complex."""
    if not isinstance(schema, dict):
        raise BadInput("schema must be a JSON object (a draft 2020-12 JSON Schema)")
    try:
        size = len(orjson.dumps(schema))
    except TypeError:  # orjson's own depth limit, far past MAX_DEPTH
        raise BadInput(f"schema is nested more than {MAX_DEPTH} levels deep") from None
    if size > MAX_SCHEMA_BYTES:
        raise BadInput(
            f"schema is {size} bytes as JSON: at most {MAX_SCHEMA_BYTES} (64 KiB) are allowed"
        )
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
        elif key in _REFS and isinstance(value, str) and not value.startswith("#"):
            raise BadInput(
                f"schema {key} {_line(value)!r} points outside the schema: only references"
                " within it (#/$defs/…, #anchor) are allowed"
            )
    if {"patternProperties", "unevaluatedProperties"} <= keywords:
        raise BadInput("schema may not use patternProperties together with unevaluatedProperties")
    _one_dialect(schema)
    meta = _MetaValidator(Draft202012Validator.META_SCHEMA, format_checker=_META_FORMATS)
    try:
        with _charged(budget or Budget(CHECK_STEPS)):
            error = next(iter(meta.iter_errors(schema)), None)
    except (OverBudget, RecursionError):
        raise BadInput("schema is too complex to check: make it smaller or simpler") from None
    if error is not None:
        exc = exceptions.SchemaError.create_from(error)
        where = f"{exc.json_path}: {_line(exc.message)}"
        raise BadInput(f"schema is not a valid draft 2020-12 JSON Schema at {where}")
    return schema


_REFS = frozenset({"$ref", "$dynamicRef"})


def _one_dialect(schema: dict[str, Any]) -> None:
    """BadInput if `$schema` stands anywhere but at the root, data included:
    jsonschema switches to the validator class a subschema's `$schema`
    names, which would leave the RE2 keywords and the budget behind."""
    level: list[Any] = [v for k, v in schema.items() if k != "$schema"]
    while level:
        below: list[Any] = []
        for node in level:
            if isinstance(node, dict):
                if "$schema" in node:
                    raise BadInput("schema may declare $schema only at its root")
                below.extend(node.values())
            elif isinstance(node, list):
                below.extend(node)
        level = below


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


def _unique_items(validator: Any, unique: Any, instance: Any, _: Any) -> Iterator[Any]:
    if not unique or not validator.is_type(instance, "array"):
        return
    _charge(len(instance))
    seen: set[Any] = set()
    for index, item in enumerate(instance):
        key = _canonical(item)
        if key in seen:
            yield exceptions.ValidationError(f"item {index} repeats an earlier item")
            return
        seen.add(key)


def _canonical(value: Any) -> Any:
    """A hashable form equal exactly where JSON Schema calls two values
    equal: 1 and 1.0 alike, true and 1 not, objects regardless of order."""
    if isinstance(value, bool) or value is None:
        return ("b", value)
    if isinstance(value, int | float):
        return ("n", value)
    if isinstance(value, str):
        return ("s", value)
    if isinstance(value, list):
        _charge(len(value))
        return ("l", tuple(_canonical(v) for v in value))
    if isinstance(value, dict):
        _charge(len(value))
        return ("o", frozenset((k, _canonical(v)) for k, v in value.items()))
    return ("?", repr(value))


def _enum(validator: Any, enums: Any, instance: Any, _: Any) -> Iterator[Any]:
    members = enums if isinstance(enums, list) else [enums]
    _charge(len(members))
    if not any(_equal(member, instance) for member in members):
        yield exceptions.ValidationError(f"value is not one of the {len(members)} allowed values")


def _const(validator: Any, const: Any, instance: Any, _: Any) -> Iterator[Any]:
    _charge(1 + (len(const) if isinstance(const, list | dict) else 0))
    if not _equal(instance, const):
        yield exceptions.ValidationError("value is not the one allowed (const)")


# Neither message repeats the enum or the value: a huge one would cost more
# to write than the check, and bounce a tenant's data back at it.


_OURS: dict[str, Any] = {
    "pattern": _pattern,
    "patternProperties": _pattern_properties,
    "additionalProperties": _additional_properties,
    "uniqueItems": _unique_items,
    "enum": _enum,
    "const": _const,
}


# ---------------------------------------------------------------- the budget

INLINE_STEPS = 1_000  # a small payload's whole check, on the event loop
INLINE_SECONDS = 0.003  # and its deadline there: a step costs from 1 to 50 µs
STEPS = 200_000  # one payload's check off the loop: a 256 KiB payload of records needs ~1/4
CHECK_STEPS = 2_000_000  # a backstop: the metaschema check counts ~10 steps (its first levels)
SECONDS = 1.0  # the deadline beside the steps, where the caller passes a clock


class OverBudget(Exception):
    """A check used up its budget before it finished."""


@dataclass(slots=True)
class Budget:
    """Keyword steps left, and a deadline on `clock` (monotonic seconds).

    With `pause`, the check also calls it every `every` seconds of its own
    work: off the event loop, `pause` sleeps a moment so that the loop's
    thread, which waits for the GIL after each of its system calls, gets it
    back within that time rather than after Python's 5 ms switch interval
    (measured: another tenant's request waited 70-190 ms behind one check
    without it)."""

    steps: int
    clock: Callable[[], float] | None = None
    deadline: float = math.inf
    pause: Callable[[], None] | None = None
    every: float = 0.0005
    next_pause: float = 0.0

    @classmethod
    def timed(
        cls,
        steps: int,
        clock: Callable[[], float],
        seconds: float,
        pause: Callable[[], None] | None = None,
    ) -> Budget:
        now = clock()
        return cls(steps, clock, now + seconds, pause, next_pause=now)

    def charge(self, n: int) -> None:
        self.steps -= n
        if self.steps < 0:
            raise OverBudget
        if self.clock is None:
            return
        now = self.clock()
        if now > self.deadline:
            raise OverBudget
        if self.pause is not None and now >= self.next_pause:
            self.pause()
            self.next_pause = self.clock() + self.every


# The budget of the check running in this thread (each thread has its own
# context): set by _charged, charged by every keyword.
_BUDGET: contextvars.ContextVar[Budget | None] = contextvars.ContextVar("budget", default=None)


def _charge(n: int) -> None:
    budget = _BUDGET.get()
    if budget is not None:
        budget.charge(n)


@contextlib.contextmanager
def _charged(budget: Budget) -> Iterator[Budget]:
    token = _BUDGET.set(budget)
    try:
        yield budget
    finally:
        _BUDGET.reset(token)


def _counted(keyword: Any) -> Any:
    def counted(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        _charge(1)
        return keyword(validator, value, instance, schema)

    return counted


SchemaValidator = validators.extend(
    Draft202012Validator,
    {k: _counted(_OURS.get(k, v)) for k, v in Draft202012Validator.VALIDATORS.items()},
)
# The metaschema check, counted the same way. Its documents declare
# `$schema`, so jsonschema's evolve falls back to its own class below the
# first levels: the count stays small, and what bounds this check is
# MAX_SCHEMA_BYTES (a schema at the limit takes under a second).
_MetaValidator = validators.extend(
    Draft202012Validator, {k: _counted(v) for k, v in Draft202012Validator.VALIDATORS.items()}
)
_META_FORMATS = Draft202012Validator.FORMAT_CHECKER
_NOTHING = Registry()  # type: ignore[var-annotated]  # retrieves nothing: no network, no files


def compile_schema(schema: dict[str, Any]) -> Validator:
    """The validator of a checked schema; BadInput for one stored before
    the one-dialect rule that breaks it. The root's `$schema` is dropped
    (check_schema made sure it is draft 2020-12) so that a `$ref` to the
    root stays with this class too."""
    _one_dialect(schema)
    root = {k: v for k, v in schema.items() if k != "$schema"}
    validator: Validator = SchemaValidator(root, registry=_NOTHING)
    return validator


def first_error(validator: Validator, instance: Any, budget: Budget | None = None) -> str | None:
    """Where and why `instance` fails (`$.amount: 'x' is not of type
    'number'`), the most relevant error as jsonschema ranks them; None if
    it passes. Raises OverBudget when `budget` runs out first."""
    try:
        with _charged(budget or Budget(STEPS)):
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
