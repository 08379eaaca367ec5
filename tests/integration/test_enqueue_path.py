"""The producers' path after schema 005/006: no NOTIFY, no foreign key lock,
one statement for a new event id; the answers stay what they were."""

from __future__ import annotations

import asyncio

import asyncpg

from tests.helpers import add_endpoint

ENQUEUE = "SELECT dispatcher_enqueue($1, $2::json, $3)"


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
