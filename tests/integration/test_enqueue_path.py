"""The producers' path after schema 005/006: no NOTIFY, no foreign key lock,
one statement for a new event id; the answers stay what they were."""

from __future__ import annotations

import asyncio

import asyncpg

from dispatcher.core.models import EndpointSpec
from dispatcher.core.signing import generate_secret
from dispatcher.db import catalog
from tests.helpers import add_endpoint

ENQUEUE = "SELECT dispatcher_enqueue($1, $2::json, $3)"
APP_ENQUEUE = "SELECT dispatcher_enqueue_app($1, $2, $3::json, $4)"


async def test_hard_delete_of_an_endpoint_takes_its_queue_rows(
    conn: asyncpg.Connection,
) -> None:
    a, _ = await add_endpoint(conn, "https://example.com/a")
    b, _ = await add_endpoint(conn, "https://example.com/b")
    await conn.fetchval(ENQUEUE, "t", "{}", "e1")
    assert await conn.fetchval("SELECT count(*) FROM webhook_queue") == 2
    await conn.execute("DELETE FROM endpoints WHERE id = $1", a)
    rows = await conn.fetch("SELECT endpoint_id FROM webhook_queue")
    assert [r[0] for r in rows] == [b]


async def test_concurrent_calls_with_one_event_id_answer_the_same_ids(
    conn: asyncpg.Connection, db_url: str
) -> None:
    await add_endpoint(conn, "https://example.com/a")
    await add_endpoint(conn, "https://example.com/b")
    other = await asyncpg.connect(db_url)
    try:
        tx = conn.transaction()
        await tx.start()
        first = await conn.fetchval(ENQUEUE, "t", "{}", "same")
        # The second call waits on the first one's uncommitted rows.
        second = asyncio.create_task(other.fetchval(ENQUEUE, "t", "{}", "same"))
        await asyncio.sleep(0.3)
        assert not second.done()
        await tx.commit()
        assert await asyncio.wait_for(second, 10) == first
    finally:
        await other.close()
    assert len(first) == 2
    assert await conn.fetchval("SELECT count(*) FROM webhook_queue") == 2
    # And once committed, again: the same answer, nothing new.
    assert await conn.fetchval(ENQUEUE, "t", "{}", "same") == first


async def test_a_repeat_is_answered_from_its_own_application_only(
    conn: asyncpg.Connection,
) -> None:
    """Another application's rows with the same event id change nothing in
    the answer: an event whose targets are gone answers with none, and one
    with a new target answers with that target's new row alone, as when no
    other application uses the id."""
    for app in ("c1", "c2"):
        await conn.execute("INSERT INTO applications (id, name) VALUES ($1, $1)", app)
    spec = EndpointSpec(url="https://example.com/c")
    a = (await catalog.add_endpoint(conn, spec, generate_secret(), app="c1")).id
    b = (await catalog.add_endpoint(conn, spec, generate_secret(), app="c1")).id
    await catalog.add_endpoint(conn, spec, generate_secret(), app="c2")
    first = await conn.fetchval(APP_ENQUEUE, "c1", "t", "{}", "m")
    assert len(first) == 2
    # Delivered: the rows move to history (within the dedup window).
    await conn.execute(
        "UPDATE webhook_live SET status = 'delivered', delivered_at = now() WHERE id = ANY ($1)",
        first,
    )
    await conn.execute("UPDATE endpoints SET enabled = false WHERE id IN ($1, $2)", a, b)
    assert len(await conn.fetchval(APP_ENQUEUE, "c2", "t", "{}", "m")) == 1
    assert await conn.fetchval(APP_ENQUEUE, "c1", "t", "{}", "m") == []
    c = (await catalog.add_endpoint(conn, spec, generate_secret(), app="c1")).id
    again = await conn.fetchval(APP_ENQUEUE, "c1", "t", "{}", "m")
    assert len(again) == 1
    assert await conn.fetchval("SELECT endpoint_id FROM webhook_live WHERE id = $1", again[0]) == c
