"""The event-type catalogue: one function per operation, and the check
every enqueue makes against it (SPEC "Event types").

Scopes: `app` None is the catalogue-wide scope, shared by every
application; an application id is that application's own types. A read
(get, list, the enqueue check) in an application sees its own types and
the catalogue-wide ones, its own first where a name is in both; a write
addresses exactly the scope it names, and an application asking to change
a catalogue-wide type is refused (Forbidden: it can read it, so its
existence is no secret). DELETE archives (Svix's default); `expunge`
removes the row.

The catalogue is opt-in: an event whose type is not in it is queued as
before. The SQL functions (dispatcher_enqueue*) check nothing: their
callers are trusted producers.

Every document is a plain dict with snake_case keys (the Svix-compatible
API shapes its own from them): name, app, description, schema (the latest
version), schemas (Svix's map of version to schema), example, archived,
feature_flag, created_at, updated_at (ISO-8601).
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any, TypeVar

import orjson

from dispatcher.core import eventschema
from dispatcher.core.errors import BadInput, Conflict, Forbidden, NotFound, Throttled, Unprocessable
from dispatcher.core.eventschema import (
    Budget,
    OverBudget,
    Validator,
    check_name,
    check_schema,
    compile_schema,
    example_of,
)
from dispatcher.core.eventschema import first_error as _first_error
from dispatcher.db import Conn, applications, eventtypes
from dispatcher.ops.inputs import Event
from dispatcher.ops.tenancy import check_app

MAX_DESCRIPTION = 2000
DEFAULT_LIST, MAX_LIST = 100, 1000  # as every list route: a larger limit is taken as 1000
MAX_TYPES = 1000  # an application's own event types, archived ones included (SPEC "Limits")
MAX_VERSIONS = 10  # schema versions one type keeps
SWITCH_S = 0.0005  # the thread switch interval while a check is out (Python's: 5 ms)
PAUSE_S = 0.0002  # a costly check's pause every 0.5 ms of its work: the event loop's turn
PAGE_BYTES = 1 << 20  # of schemas in one page of a list: a page ends early past it
PATCH_FIELDS = frozenset({"description", "schema", "schemas", "archived", "feature_flag"})


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _latest(schemas: Mapping[str, Any] | None) -> Any:
    if not schemas:
        return None
    return schemas[max(schemas, key=int)]


def event_type_public(row: Mapping[str, Any]) -> dict[str, Any]:
    schemas = None if row["schemas"] is None else orjson.loads(row["schemas"])
    schema = _latest(schemas)
    return {
        "name": row["name"],
        "app": row["app"],
        "description": row["description"],
        "schema": schema,
        "schemas": schemas,
        "example": None if schema is None else example_of(schema),
        "archived": row["archived_at"] is not None,
        "feature_flag": row["feature_flag"],
        "created_at": _iso(row["created_at"]),
        "updated_at": _iso(row["updated_at"]),
    }


# ---------------------------------------------------------------- checks


def _scope(app: Any) -> str | None:
    return None if app is None else check_app(app)


def _description(value: Any) -> str:
    if value is None:
        return ""
    if not isinstance(value, str) or len(value) > MAX_DESCRIPTION:
        raise BadInput(f"description must be text of at most {MAX_DESCRIPTION} characters")
    return value


def _feature_flag(value: Any) -> str | None:
    if value is None:
        return None
    try:
        return check_name(value)
    except BadInput:
        raise BadInput("feature_flag must be 1-256 of A-Z, a-z, 0-9, _, . and -") from None


async def _schemas_text(schema: Any, schemas: Any, scope: str | None) -> str | None:
    """`schema` (one version, ours) or `schemas` (Svix's map of version to
    schema) as the stored JSON text; each version checked, off the event
    loop (see _off_loop)."""
    if schemas is not None:
        if schema is not None:
            raise BadInput("give schema or schemas, not both")
        if not isinstance(schemas, dict) or not all(
            isinstance(k, str) and k.isascii() and k.isdigit() and 0 < len(k) < 10 for k in schemas
        ):
            raise BadInput('schemas must map versions ("1", "2", …) to JSON Schemas')
        if len(schemas) > MAX_VERSIONS:
            raise BadInput(f"schemas may hold at most {MAX_VERSIONS} versions")
        for version in schemas.values():
            await _off_loop(scope, check_schema, version)
        return orjson.dumps(schemas).decode() if schemas else None
    if schema is None:
        return None
    return orjson.dumps({"1": await _off_loop(scope, check_schema, schema)}).decode()


# ---------------------------------------------------------------- operations


async def add_event_type(
    conn: Conn,
    name: Any,
    *,
    description: Any = None,
    schema: Any = None,
    app: Any = None,
    feature_flag: Any = None,
    schemas: Any = None,
) -> dict[str, Any]:
    """A new type in `app`'s scope (None: catalogue-wide); a name taken
    there, or an application at MAX_TYPES, is Conflict, an invalid schema
    BadInput."""
    scope, name = _scope(app), check_name(name)
    description, flag = _description(description), _feature_flag(feature_flag)
    if scope is not None and await eventtypes.count_event_types(conn, scope) >= MAX_TYPES:
        raise Conflict(f"application {scope} has reached its limit of {MAX_TYPES} event types")
    text = await _schemas_text(schema, schemas, scope)
    row = await eventtypes.add_event_type(conn, scope, name, description, text, flag)
    return event_type_public(row)


async def list_event_types(
    conn: Conn,
    app: Any = None,
    include_archived: bool = False,
    limit: int | None = None,
    after: str | None = None,
) -> list[dict[str, Any]]:
    """What `app` sees (None: the catalogue-wide types), by name; at most
    `limit` (default 100), after the name `after` (a page's last), and
    fewer where their schemas pass PAGE_BYTES."""
    return (await list_event_types_page(conn, app, include_archived, limit, after))[0]


async def list_event_types_page(
    conn: Conn,
    app: Any = None,
    include_archived: bool = False,
    limit: int | None = None,
    after: str | None = None,
) -> tuple[list[dict[str, Any]], bool]:
    """list_event_types, and whether PAGE_BYTES cut the page short (more
    may follow even though fewer than `limit` came)."""
    scope = _scope(app)
    if scope is not None:
        await applications.require_applications(conn, [scope])
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise BadInput("limit must be a positive integer")
    cap = DEFAULT_LIST if limit is None else min(limit, MAX_LIST)
    rows = await eventtypes.list_event_types(conn, scope, bool(include_archived), cap, after)
    kept = _within_page_bytes(rows)
    return [event_type_public(r) for r in kept], len(kept) < len(rows)


def _within_page_bytes(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The first rows whose schemas fit PAGE_BYTES (at least one): a list
    of many large schemas is read a page at a time, not built whole."""
    total = 0
    for n, row in enumerate(rows):
        total += len(row["schemas"] or "")
        if total > PAGE_BYTES and n:
            return rows[:n]
    return rows


async def get_event_type(conn: Conn, name: Any, app: Any = None) -> dict[str, Any]:
    row = await eventtypes.get_event_type(conn, _scope(app), check_name(name))
    if row is None:
        raise NotFound(f"no event type {name}")
    return event_type_public(row)


async def exists(conn: Conn, name: Any, app: Any = None) -> bool:
    """Whether `app`'s scope itself (not the catalogue-wide one it also
    reads) has the type: where a PUT updates rather than creates."""
    scope = _scope(app)
    row = await eventtypes.get_event_type(conn, scope, check_name(name))
    return row is not None and row["app"] == scope


async def _refused_write(conn: Conn, name: str, scope: str | None) -> BadInput:
    """Why a write found nothing in `scope`: the name is catalogue-wide
    (Forbidden to an application) or unknown."""
    if scope is not None and await eventtypes.get_event_type(conn, scope, name) is not None:
        return Forbidden(f"event type {name} is catalogue-wide: only the operator changes it")
    return NotFound(f"no event type {name}")


async def update_event_type(
    conn: Conn, name: Any, patch: Mapping[str, Any], app: Any = None
) -> dict[str, Any]:
    """PATCH: the fields given change (description, schema or schemas, a
    null clearing it, archived, feature_flag); the others stay."""
    name, scope = check_name(name), _scope(app)
    unknown = sorted(set(patch) - PATCH_FIELDS)
    if unknown:
        raise BadInput(f"unknown field: {unknown[0]}")
    changes: dict[str, Any] = {}
    if "description" in patch:
        changes["description"] = _description(patch["description"])
    if "schema" in patch or "schemas" in patch:
        changes["schemas"] = await _schemas_text(patch.get("schema"), patch.get("schemas"), scope)
    if "feature_flag" in patch:
        changes["feature_flag"] = _feature_flag(patch["feature_flag"])
    if "archived" in patch:
        if not isinstance(patch["archived"], bool):
            raise BadInput("archived must be true or false")
        changes["archived"] = patch["archived"]
    row = await eventtypes.update_event_type(conn, scope, name, changes)
    if row is None:
        raise await _refused_write(conn, name, scope)
    return event_type_public(row)


async def archive_event_type(
    conn: Conn, name: Any, app: Any = None, archived: bool = True
) -> dict[str, Any]:
    """An archived type stays listed (with include_archived) and accepts
    no new events; `archived=False` takes it back."""
    return await update_event_type(conn, name, {"archived": archived}, app)


async def delete_event_type(
    conn: Conn, name: Any, app: Any = None, expunge: bool = False
) -> dict[str, Any]:
    """Archives, as Svix's DELETE does; `expunge` removes the row (events
    of that name are then queued unchecked, as for any unknown type)."""
    if not expunge:
        return await archive_event_type(conn, name, app)
    name, scope = check_name(name), _scope(app)
    row = await eventtypes.expunge_event_type(conn, scope, name)
    if row is None:
        raise await _refused_write(conn, name, scope)
    return event_type_public(row)


# ---------------------------------------------------------------- the enqueue check

# Compiled validators by (scope, name, updated_at): a type changed gets a
# new key, so nothing is invalidated by hand; the oldest go past the cap.
_VALIDATORS: OrderedDict[tuple[str | None, str, datetime], Validator] = OrderedDict()
VALIDATOR_CACHE_SIZE = 1024


def _validator(key: tuple[str | None, str, datetime], schema: str) -> Validator:
    found = _VALIDATORS.get(key)
    if found is None:
        found = _VALIDATORS[key] = compile_schema(orjson.loads(schema))
        while len(_VALIDATORS) > VALIDATOR_CACHE_SIZE:
            _VALIDATORS.popitem(last=False)
    else:
        _VALIDATORS.move_to_end(key)
    return found


async def validate_payload(
    conn: Conn,
    app: str | None,
    event_type: str,
    payload: Any,
    *,
    endpoint_id: int | None = None,
) -> None:
    """Unprocessable, naming the failing path, when the type that governs
    this event (in `app`, or as enqueue resolves it: `endpoint_id`'s
    application, else default) is archived or its schema refuses
    `payload` (JSON text or bytes, or a value). One indexed lookup; the
    payload is parsed only when the type has a schema."""
    governing = await eventtypes.type_for_enqueue(conn, event_type, app, endpoint_id)
    await _check(event_type, governing, payload, app)


async def _check(
    event_type: str, governing: eventtypes.Governing | None, payload: Any, sender: str | None
) -> None:
    """`sender`: the application sending (None: as enqueue resolves it),
    whose one costly check at a time this may be."""
    if governing is None:
        return
    if governing.archived:
        raise Unprocessable(f"event type {event_type} is archived")
    if governing.schema is None:
        return
    validator = _validator((governing.app, event_type, governing.updated_at), governing.schema)
    doc = orjson.loads(payload) if isinstance(payload, str | bytes) else payload
    try:  # most payloads are small: checked here, in a few milliseconds at most
        inline = Budget.timed(eventschema.INLINE_STEPS, time.monotonic, eventschema.INLINE_SECONDS)
        where = _first_error(validator, doc, inline)
    except OverBudget:
        where = await _off_loop(sender, _checked_within_budget, validator, doc, event_type)
    if where is not None:
        raise Unprocessable(f"payload does not match event type {event_type}'s schema at {where}")


def _pause() -> None:
    time.sleep(PAUSE_S)


def _checked_within_budget(validator: Validator, doc: Any, event_type: str) -> str | None:
    budget = Budget.timed(eventschema.STEPS, time.monotonic, eventschema.SECONDS, _pause)
    try:
        return _first_error(validator, doc, budget)
    except OverBudget:
        raise Unprocessable(
            f"payload is too costly to check against event type {event_type}'s schema"
            " (past the validation budget): send a smaller payload or simplify the schema"
        ) from None


async def validate_events(conn: Conn, events: Iterable[Event]) -> None:
    """validate_payload for a bulk file: one lookup per distinct type and
    destination; a refusal names the event by its id."""
    found: dict[tuple[str, str | None, int | None], eventtypes.Governing | None] = {}
    for event_id, event_type, payload, endpoint, app in events:
        key = (event_type, app, None if app is not None else endpoint)
        if key not in found:
            found[key] = await eventtypes.type_for_enqueue(conn, event_type, app, endpoint)
        try:
            await _check(event_type, found[key], payload, app)
        except Unprocessable as exc:
            raise Unprocessable(f"event {event_id}: {exc}") from None


# ---------------------------------------------------------------- off the event loop

# Costly checks (a metaschema check, a large payload's validation) run on
# these threads, never on the event loop: two, so that one application's
# check never waits for another's more than one budget. Each check is
# bounded by its budget, and an application has at most one running: a
# second is refused at once (429) rather than queued, because its caller
# holds a pooled database connection while it waits.
_POOL = ThreadPoolExecutor(max_workers=2, thread_name_prefix="dispatcher-schema")
_CHECKING: set[str | None] = set()
_SWITCH = [0.005]  # the interpreter's thread switch interval while no check is out
_T = TypeVar("_T")


async def _off_loop(scope: str | None, fn: Callable[..., _T], *args: Any) -> _T:
    if scope in _CHECKING:
        raise Throttled(
            "another schema check of this application is still running: retry in 1 s", 1
        )
    if not _CHECKING:  # the first check out: the loop's thread gets the GIL back sooner
        _SWITCH[0] = sys.getswitchinterval()
        sys.setswitchinterval(SWITCH_S)
    _CHECKING.add(scope)
    try:
        return await asyncio.get_running_loop().run_in_executor(_POOL, fn, *args)
    finally:
        _CHECKING.discard(scope)
        if not _CHECKING:
            sys.setswitchinterval(_SWITCH[0])
