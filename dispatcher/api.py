"""The producer API: enqueue inside the caller's own transaction."""

from __future__ import annotations

from typing import Any

import asyncpg
import orjson

from . import store
from .errors import BadInput

DEFAULT_MAX_PAYLOAD_BYTES = 256 * 1024


def payload_text(payload: Any, max_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES) -> str:
    """The exact JSON text to store (and later sign and send)."""
    text = _payload_text(payload)
    size = len(text.encode())
    if size > max_bytes:
        raise BadInput(f"payload is {size} bytes, over the limit of {max_bytes}")
    return text


def _payload_text(payload: Any) -> str:
    if isinstance(payload, bytes | bytearray | memoryview):
        raw = bytes(payload)
        try:
            orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise BadInput(f"payload is not valid JSON: {exc}") from None
        try:
            return raw.decode()
        except UnicodeDecodeError:  # pragma: no cover - orjson refuses invalid UTF-8 first
            raise BadInput("payload is not UTF-8") from None
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


def check_event_type(value: Any) -> str:
    if not isinstance(value, str) or not value or len(value) > 200 or not value.isprintable():
        raise BadInput("event_type must be 1..200 printable characters")
    return value


def check_event_id(value: Any) -> str | None:
    """None stays None (an id is generated); anything else must be a usable id."""
    if value is not None and (
        not isinstance(value, str) or not value or len(value) > 200 or not value.isprintable()
    ):
        raise BadInput("event_id must be 1..200 printable characters")
    return value


def check_endpoint_id(value: Any) -> int | None:
    if value is not None and (
        isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 2**63
    ):
        raise BadInput("endpoint must be an integer id")
    return value


async def enqueue(
    conn: asyncpg.Connection,
    event_type: str,
    payload: Any,
    event_id: str | None = None,
    *,
    endpoint_id: int | None = None,
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
) -> list[int]:
    """Queue one event on the caller's connection; commits with the caller.

    `payload` may be JSON text or bytes (sent exactly as given) or any value
    orjson encodes. Returns the delivery ids (the existing ones when the event
    id was already queued).
    """
    if not event_type or len(event_type) > 200 or not event_type.isprintable():
        raise BadInput("event_type must be 1..200 printable characters")
    if event_id is not None and (not event_id or len(event_id) > 200 or not event_id.isprintable()):
        raise BadInput("event_id must be 1..200 printable characters")
    text = payload_text(payload, max_payload_bytes)
    return await store.enqueue(conn, event_type, text, event_id, endpoint_id)
