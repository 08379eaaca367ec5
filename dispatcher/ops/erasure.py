"""Erasure (SPEC "History, payloads and retention"): an event's payload, an
application's payloads (before a time), or every payload whose top-level
fields hold given values (a data-protection request for one person).

What goes: the payload of every delivery selected and of its Svix message.
What stays: the delivery rows, their statuses and attempts, for the record,
with `payload_expired: true`. A delivery still to be sent is cancelled
(`last_error` "payload expunged"); one on the wire finishes, and if it must
be retried it dead-letters unsent. None of them can be resent or replayed.
Each call answers `{"expunged": n}`, the events whose payload it erased (a
second call: 0).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dispatcher.core.errors import BadInput
from dispatcher.db import Conn, applications, erasure
from dispatcher.ops.events import event_app, event_id_required
from dispatcher.ops.inputs import parse_time
from dispatcher.ops.tenancy import check_app

# Fields of one payload_contains request: a person is found by an id or
# two, never by a document.
MAX_CONTAINS_KEYS = 16


async def expunge_event(conn: Conn, event_id: Any, app: str | None = None) -> dict[str, int]:
    """One event's payload, in `app` (an application's caller, or the
    operator naming one) or in the one application that has it."""
    event_id = event_id_required(event_id)
    of = await event_app(conn, event_id, app)
    # As cancel: the operator's own ops deliveries are no tenant's (issue 32).
    n = await erasure.expunge_event(conn, of, event_id, operator_ops=app is None)
    return {"expunged": n}


async def expunge_message(conn: Conn, app: str, msg_id: str) -> int:
    """A Svix message's payload by its id (resolved by the caller): 0 when
    it had none left."""
    return await erasure.expunge_event(conn, app, msg_id, operator_ops=False)


async def expunge(
    conn: Conn,
    app: str | None,
    *,
    before: Any = None,
    payload_contains: Any = None,
) -> dict[str, int]:
    """Every payload of `app` (None: of every application, the operator's
    call) enqueued before `before` and matching `payload_contains`."""
    if app is not None:
        await applications.require_applications(conn, [check_app(app)])
    cut = parse_time(before, "before")
    contains = check_contains(payload_contains)
    return {"expunged": await erasure.expunge(conn, app, before=cut, contains=contains)}


def check_contains(value: Any) -> dict[str, Any] | None:
    """payload_contains: an object of 1-16 top-level fields and the JSON
    values they must equal (numbers compare as numbers: 7 matches 7.0)."""
    if value is None:
        return None
    if not isinstance(value, Mapping) or not value:
        raise BadInput("payload_contains must be an object of fields and values, e.g. "
                       '{"user_id": "u_123"}')  # fmt: skip
    if len(value) > MAX_CONTAINS_KEYS:
        raise BadInput(f"payload_contains takes at most {MAX_CONTAINS_KEYS} fields")
    for key in value:
        if not isinstance(key, str) or not key or len(key) > 200:
            raise BadInput("payload_contains: each field name is 1-200 characters")
    return dict(value)


def parse_contains_flag(pairs: list[str]) -> dict[str, Any] | None:
    """`--payload-contains KEY=VALUE` (repeatable) as the CLI types it:
    VALUE is JSON when it parses as JSON (`42`, `true`, `"42"`), else text."""
    import orjson

    if not pairs:
        return None
    doc: dict[str, Any] = {}
    for pair in pairs:
        key, eq, raw = pair.partition("=")
        if not eq or not key:
            raise BadInput(f"--payload-contains takes KEY=VALUE, got {pair!r:.60}")
        try:
            doc[key] = orjson.loads(raw)
        except orjson.JSONDecodeError:
            doc[key] = raw
    return check_contains(doc)
