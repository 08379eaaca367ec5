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

from collections import OrderedDict
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

import orjson

from dispatcher.core.errors import BadInput, Forbidden, NotFound, Unprocessable
from dispatcher.core.eventschema import (
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


def _schemas_text(schema: Any, schemas: Any) -> str | None:
    """`schema` (one version, ours) or `schemas` (Svix's map of version to
    schema) as the stored JSON text; each version checked."""
    if schemas is not None:
        if schema is not None:
            raise BadInput("give schema or schemas, not both")
        if not isinstance(schemas, dict) or not all(
            isinstance(k, str) and k.isascii() and k.isdigit() and 0 < len(k) < 10 for k in schemas
        ):
            raise BadInput('schemas must map versions ("1", "2", …) to JSON Schemas')
        for version in schemas.values():
            check_schema(version)
        return orjson.dumps(schemas).decode() if schemas else None
    if schema is None:
        return None
    return orjson.dumps({"1": check_schema(schema)}).decode()


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
    there is Conflict, an invalid schema BadInput."""
    row = await eventtypes.add_event_type(
        conn, _scope(app), check_name(name), _description(description),
        _schemas_text(schema, schemas), _feature_flag(feature_flag),
    )  # fmt: skip
    return event_type_public(row)


async def list_event_types(
    conn: Conn,
    app: Any = None,
    include_archived: bool = False,
    limit: int | None = None,
    after: str | None = None,
) -> list[dict[str, Any]]:
    """What `app` sees (None: the catalogue-wide types), by name; at most
    `limit` (default 100), after the name `after` (a page's last)."""
    scope = _scope(app)
    if scope is not None:
        await applications.require_applications(conn, [scope])
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise BadInput("limit must be a positive integer")
    cap = DEFAULT_LIST if limit is None else min(limit, MAX_LIST)
    rows = await eventtypes.list_event_types(conn, scope, bool(include_archived), cap, after)
    return [event_type_public(r) for r in rows]


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
        changes["schemas"] = _schemas_text(patch.get("schema"), patch.get("schemas"))
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
    _check(event_type, governing, payload)


def _check(event_type: str, governing: eventtypes.Governing | None, payload: Any) -> None:
    if governing is None:
        return
    if governing.archived:
        raise Unprocessable(f"event type {event_type} is archived")
    if governing.schema is None:
        return
    validator = _validator((governing.app, event_type, governing.updated_at), governing.schema)
    doc = orjson.loads(payload) if isinstance(payload, str | bytes) else payload
    where = _first_error(validator, doc)
    if where is not None:
        raise Unprocessable(f"payload does not match event type {event_type}'s schema at {where}")


async def validate_events(conn: Conn, events: Iterable[Event]) -> None:
    """validate_payload for a bulk file: one lookup per distinct type and
    destination; a refusal names the event by its id."""
    found: dict[tuple[str, str | None, int | None], eventtypes.Governing | None] = {}
    for event_id, event_type, payload, endpoint, app in events:
        key = (event_type, app, None if app is not None else endpoint)
        if key not in found:
            found[key] = await eventtypes.type_for_enqueue(conn, event_type, app, endpoint)
        try:
            _check(event_type, found[key], payload)
        except Unprocessable as exc:
            raise Unprocessable(f"event {event_id}: {exc}") from None
