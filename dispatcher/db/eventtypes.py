"""Data access for the event-type catalogue (schema/010_event_types.sql).

Rows come back as dicts with `schemas` as JSON text: ops.eventtypes parses
and shapes them. A write addresses one scope exactly (None: catalogue-wide);
a read resolves a name as the enqueue check does, the application's own
type first.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from dispatcher.core.errors import Conflict, UnknownApplication
from dispatcher.db import Conn, Q


async def add_event_type(
    conn: Conn,
    app: str | None,
    name: str,
    description: str,
    schemas: str | None,
    feature_flag: str | None,
) -> dict[str, Any]:
    try:
        row = await conn.fetchrow(Q["insert_event_type"], app, name, description, schemas,
                                  feature_flag)  # fmt: skip
    except asyncpg.ForeignKeyViolationError:
        raise UnknownApplication(f"no application {app}") from None
    if row is None:
        raise Conflict(f"event type {name} already exists")
    return dict(row)


async def count_event_types(conn: Conn, app: str) -> int:
    return int(await conn.fetchval(Q["count_event_types"], app))


async def list_event_types(
    conn: Conn, app: str | None, include_archived: bool, limit: int, after: str | None
) -> list[dict[str, Any]]:
    rows = await conn.fetch(Q["list_event_types"], app, include_archived, limit, after)
    return [dict(r) for r in rows]


async def get_event_type(conn: Conn, app: str | None, name: str) -> dict[str, Any] | None:
    row = await conn.fetchrow(Q["get_event_type"], app, name)
    return None if row is None else dict(row)


async def update_event_type(
    conn: Conn, app: str | None, name: str, changes: Mapping[str, Any]
) -> dict[str, Any] | None:
    """`changes`: the columns that change (description, schemas as JSON
    text, feature_flag, archived); None if the scope has no such type."""
    row = await conn.fetchrow(
        Q["update_event_type"], app, name,
        "description" in changes, changes.get("description"),
        "schemas" in changes, changes.get("schemas"),
        "feature_flag" in changes, changes.get("feature_flag"),
        "archived" in changes, bool(changes.get("archived")),
    )  # fmt: skip
    return None if row is None else dict(row)


async def expunge_event_type(conn: Conn, app: str | None, name: str) -> dict[str, Any] | None:
    row = await conn.fetchrow(Q["expunge_event_type"], app, name)
    return None if row is None else dict(row)


@dataclass(frozen=True, slots=True)
class Governing:
    """The type an event is checked against: its scope, version and schema."""

    app: str | None
    updated_at: datetime
    archived: bool
    schema: str | None  # JSON text of the latest version


async def type_for_enqueue(
    conn: Conn, name: str, app: str | None, endpoint_id: int | None
) -> Governing | None:
    row = await conn.fetchrow(Q["event_type_for_enqueue"], name, app, endpoint_id)
    if row is None:
        return None
    return Governing(row["app"], row["updated_at"], row["archived"], row["schema"])
