"""The producer API: enqueue inside the caller's own transaction."""

from __future__ import annotations

from typing import Any

import asyncpg
import orjson

from . import store
from .errors import BadInput


def payload_text(payload: Any) -> str:
    """The exact JSON text to store (and later sign and send)."""
    if isinstance(payload, bytes | bytearray | memoryview):
        raw = bytes(payload)
        try:
            orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise BadInput(f"payload is not valid JSON: {exc}") from None
        return raw.decode()
    if isinstance(payload, str):
        try:
            orjson.loads(payload)
        except orjson.JSONDecodeError as exc:
            raise BadInput(f"payload is not valid JSON: {exc}") from None
        return payload
    try:
        return orjson.dumps(payload).decode()
    except TypeError as exc:
        raise BadInput(f"payload cannot be encoded as JSON: {exc}") from None


async def enqueue(
    conn: asyncpg.Connection,
    event_type: str,
    payload: Any,
    event_id: str | None = None,
    *,
    endpoint_id: int | None = None,
) -> list[int]:
    """Queue one event on the caller's connection; commits with the caller.

    `payload` may be JSON text or bytes (sent exactly as given) or any value
    orjson encodes. Returns the delivery ids (the existing ones when the event
    id was already queued).
    """
    if not event_type:
        raise BadInput("event_type must not be empty")
    return await store.enqueue(conn, event_type, payload_text(payload), event_id, endpoint_id)
