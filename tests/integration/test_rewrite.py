"""Outcomes written again after a failover (worker/rewriter.py, the store's
rewrite_outcomes): applied only where the server lacks them, idempotent,
and nothing counted twice. Rows are put by hand in the states a promoted
standby can hold them in."""

from __future__ import annotations

import asyncpg

from dispatcher.core.failover import Rewrite
from dispatcher.core.models import Outcome, Status
from dispatcher.db import catalog, store
from dispatcher.worker.rewriter import Rewriter
from tests.helpers import add_endpoint

ME = "w-me"


def _out(i: int, status: Status, attempt: int, *, spent: bool = True, delay: float = 0.0,
         code: int = 200, gone: bool = False) -> Outcome:  # fmt: skip
    # Endpoint 1: the test database's first.
    return Outcome(i, 1, status, delay, spent, code, 7, None, gone, None, attempt)


async def _rows(conn: asyncpg.Connection) -> dict[str, asyncpg.Record]:
    rows = await conn.fetch(
        "SELECT event_id, id, status, attempt_count, locked_by, last_status_code,"
        " extract(epoch FROM next_attempt_at - now())::float8 AS due_in,"
        " extract(epoch FROM now() - delivered_at)::float8 AS delivered_ago,"
        " next_attempt_at, delivered_at, updated_at"
        " FROM webhook_queue ORDER BY id"
    )
    return {r["event_id"]: r for r in rows}


async def _setup(conn: asyncpg.Connection) -> dict[str, int]:
    """Six rows as a standby that missed the last writes may hold them."""
    await add_endpoint(conn, "http://127.0.0.1:9/r")
    await catalog.enqueue_bulk(conn, [(e, "t", "{}", None) for e in "abcdef"])
    ids = {
        r["event_id"]: r["id"] for r in await conn.fetch("SELECT event_id, id FROM webhook_queue")
    }
    states = {
        "a": ("pending", 0, None, "0"),  # the claim lost too
        "b": ("in_flight", 0, ME, "-5"),  # claimed by me, the outcome lost
        "c": ("delivered", 0, None, "0"),  # the outcome survived
        "d": ("failed", 1, None, "10"),  # a failed attempt survived
        "e": ("in_flight", 0, "w-other", "30"),  # claimed again by another worker
        "f": ("pending", 0, None, "0"),  # two outcomes lost: a retry, then dead
    }
    for e, (status, attempts, by, due) in states.items():
        await conn.execute(
            "UPDATE webhook_queue SET status = $2, attempt_count = $3, locked_by = $4,"
            " next_attempt_at = now() + make_interval(secs => $5::float8) WHERE id = $1",
            ids[e], status, attempts, by, float(due),
        )  # fmt: skip
    return ids


async def test_rewrite_applies_only_where_the_server_lacks_the_outcome(
    conn: asyncpg.Connection,
) -> None:
    ids = await _setup(conn)
    rewrites = [
        Rewrite(_out(ids["a"], Status.DELIVERED, 0), 3.0),
        Rewrite(_out(ids["b"], Status.FAILED, 0, delay=10.0, code=500), 4.0),
        Rewrite(_out(ids["c"], Status.DELIVERED, 0), 3.0),
        Rewrite(_out(ids["d"], Status.FAILED, 0, delay=10.0, code=500), 3.0),
        Rewrite(_out(ids["e"], Status.DELIVERED, 0), 3.0),
        Rewrite(_out(ids["f"], Status.FAILED, 0, code=500), 2.0),
        Rewrite(_out(ids["f"], Status.DEAD_LETTER, 1, code=500), 1.0),
    ]
    before = await store.rewrite_outcomes(conn, rewrites, ME)
    assert before == {ids["a"]: 0, ids["b"]: 0, ids["f"]: 0}
    rows = await _rows(conn)
    assert rows["a"]["status"] == "delivered" and rows["a"]["attempt_count"] == 1
    assert 2.5 < rows["a"]["delivered_ago"] < 30  # when it was first written
    assert rows["b"]["status"] == "failed" and rows["b"]["attempt_count"] == 1
    assert rows["b"]["locked_by"] is None and 0 < rows["b"]["due_in"] <= 6.0  # 10 s less 4
    assert rows["c"]["status"] == "delivered" and rows["c"]["attempt_count"] == 0
    assert rows["d"]["status"] == "failed" and rows["d"]["attempt_count"] == 1
    assert rows["e"]["status"] == "in_flight" and rows["e"]["locked_by"] == "w-other"
    assert rows["f"]["status"] == "dead_letter" and rows["f"]["attempt_count"] == 2
    samples = dict(
        await conn.fetch("SELECT delivery_id, count(*) FROM endpoint_latency GROUP BY delivery_id")
    )
    # One per attempt the server lacked: none where the outcome survived.
    assert samples == {ids["a"]: 1, ids["b"]: 1, ids["f"]: 2}
    # Again: nothing changes, nothing is counted twice.
    assert await store.rewrite_outcomes(conn, rewrites, ME) == {}
    fixed = (
        "status",
        "attempt_count",
        "locked_by",
        "next_attempt_at",
        "delivered_at",
        "updated_at",
    )
    again = await _rows(conn)
    assert {e: [r[k] for k in fixed] for e, r in again.items()} == {
        e: [r[k] for k in fixed] for e, r in rows.items()
    }
    assert await conn.fetchval("SELECT count(*) FROM endpoint_latency") == 4


async def test_the_rewriter_writes_again_once_per_server(
    conn: asyncpg.Connection, db_url: str
) -> None:
    ids = await _setup(conn)
    rewriter = Rewriter(worker=ME, keep_s=600)
    await rewriter.connected(conn)  # the server the outcomes were written on
    server = rewriter.server
    assert server is not None and server.endswith(
        str(await conn.fetchval("SELECT extract(epoch FROM pg_postmaster_start_time())::numeric"))
    )
    rewriter.wrote([_out(ids["a"], Status.DELIVERED, 0),
                    _out(ids["b"], Status.PENDING, 0, spent=False)])  # fmt: skip
    assert rewriter.kept == 1  # a row handed back unsent is not kept
    await rewriter.connected(conn)  # the same server: nothing to do
    assert (await _rows(conn))["a"]["status"] == "pending"
    rewriter.server = "00000001@0"  # as if written on a server since replaced
    rewriter.wrote([_out(ids["f"], Status.DEAD_LETTER, 0, code=410, gone=True)])
    await rewriter.connected(conn)
    rows = await _rows(conn)
    assert rows["a"]["status"] == "pending"  # acknowledged by this server: left alone
    assert rows["f"]["status"] == "dead_letter"
    assert rewriter.rewritten == 1 and rewriter.server == server
    # The 410's disable, lost with its flush, is applied again.
    assert await conn.fetchval("SELECT enabled FROM endpoints WHERE id = 1") is False
    await rewriter.connected(conn)
    assert rewriter.rewritten == 1


async def test_an_outcome_applies_to_a_row_whose_claim_was_lost(
    conn: asyncpg.Connection,
) -> None:
    """record_outcomes after a failover that lost the claim as well: the
    row is pending again, no attempt recorded since; it takes the outcome.
    Rows another worker holds, or attempted since, do not."""
    ids = await _setup(conn)
    outcomes = [
        _out(ids["a"], Status.DELIVERED, 0),  # pending: the claim was lost
        _out(ids["b"], Status.DELIVERED, 0),  # still held by me
        _out(ids["d"], Status.DELIVERED, 0),  # failed at attempt 0 already: newer
        _out(ids["e"], Status.DELIVERED, 0),  # another worker holds it
        _out(ids["f"], Status.DELIVERED, -1),  # the attempt unknown
    ]
    await store.record_outcomes(conn, outcomes, ME)
    rows = await _rows(conn)
    assert {e: (r["status"], r["attempt_count"]) for e, r in rows.items()} == {
        "a": ("delivered", 1),
        "b": ("delivered", 1),
        "c": ("delivered", 0),
        "d": ("failed", 1),
        "e": ("in_flight", 0),
        "f": ("pending", 0),
    }
