"""What maintenance does to the tables, one worker at a time: the
percentile refresh, retention (partitions made ahead and dropped whole,
the small tables pruned in batches), the moves of an upgrade (history's
backfill, the dedup keys' seeding) and the hot tables' vacuum.

The worker's hot path (claims, outcomes, breakers) is store.py's; this is
what runs beside it every few seconds, each step a short statement.
"""

from __future__ import annotations

from dispatcher.core.retention import Retention, partition_width_s, partitions_ahead
from dispatcher.core.tablehealth import HOT_TABLES, TableHealth
from dispatcher.db import HISTORY_PARTITIONED, MAINTENANCE_LOCK, Conn, Q, latency
from dispatcher.db.migrator import partitioned_retention

VACUUM_LOCK = MAINTENANCE_LOCK + 1
# Partitions past retention dropped per table a maintenance round, one a
# transaction: a round catches up with a backlog of days (a retention just
# shortened, a worker that was down) without holding a parent's lock long.
MAX_DROPS = 50


async def maintain(
    conn: Conn,
    window_s: float,
    retention: Retention | None = None,
    *,
    dedup_window_s: float | None = None,
    batch: int = 10_000,
    max_batches: int = 20,
) -> bool | None:
    """Percentiles and pruning, by one worker at a time (an advisory lock):
    every growing table past its retention (settings.Retention; None: the
    defaults).

    `dedup_window_s`: the workers' DISPATCHER_DEDUP_WINDOW_S, stored where
    the enqueue functions read it, cut to the shortest final retention
    (Retention.dedup_window; None: left as it is); the window's keys
    rotated, and those of rows from before schema 027 written.

    Returns whether it got to the end of what there was to remove and to
    move (False: a batch limit stopped it, the next round goes on; None:
    another worker holds the lock). Each delete is its own short
    statement, so no long lock ever meets a claim.
    """
    keep = retention or Retention()
    kept = Retention.kept
    async with conn.transaction():
        got = await conn.fetchval("SELECT pg_try_advisory_xact_lock($1)", MAINTENANCE_LOCK)
        if not got:
            return None
        await conn.execute(Q["prune_minutes"], window_s)
        await conn.execute(Q["fold_counts"])
        await conn.execute(Q["roll_up_hours"])
        await latency.refresh_percentiles(conn, window_s)
        await conn.execute(Q["prune_secrets"])
        if dedup_window_s is not None:
            await conn.execute(Q["set_dedup_window"], keep.dedup_window(dedup_window_s))
        await conn.execute(Q["expire_held"], batch)
        if (delivered_s := kept(keep.delivered_s)) is not None:
            await conn.execute(Q["expire_unread_polls"], delivered_s, batch)
        # The small tables: one bounded batch a round each keeps up.
        await conn.execute(Q["idempotency_prune"], batch, kept(keep.idempotency_s))
        await conn.execute(Q["prune_portal"], kept(keep.portal_s))
        await conn.execute(Q["prune_transitions"], kept(keep.transitions_s), batch)
        await conn.execute(Q["prune_messages"], kept(keep.messages_s), batch)
        payload_s, messages_s = kept(keep.payload_s), kept(keep.messages_s)
        if payload_s is not None and (messages_s is None or messages_s > payload_s):
            await conn.execute(Q["erase_expired_message_payloads"], payload_s, batch)
    finished = True
    # The time-partitioned tables (schema 023, 025, 026): partitions made
    # ahead and dropped whole past their retention, each DDL its own short
    # transaction; then up to max_batches short deletes a round of what no
    # drop takes (a default partition's rows, a partition wider than the
    # retention now asks for).
    for parent, keep_s in partitioned_retention(keep).items():
        width = partition_width_s(keep_s)
        # A call drops at most one partition, in its own transaction.
        for _ in range(MAX_DROPS):
            made = await conn.fetchrow(
                Q["day_partitions"], parent, partitions_ahead(width), keep_s, width, None
            )
            if made is None or not made["dropped"]:
                break
        # Payloads go only with their day, after the rows still to be sent
        # took theirs inline (dispatcher_day_partitions): never row by row.
        if keep_s is None or parent == "event_payloads":
            continue
        for _ in range(max_batches):
            if await conn.fetchval(Q["prune_partition_rows"], parent, keep_s, width, batch) < batch:
                break
        else:
            finished = False
    if payload_s is not None and keep.payloads_outlive_rows():
        # Inline payloads of final rows kept longer than payloads are.
        await conn.execute(Q["erase_expired_payloads"], payload_s, batch)
    await conn.execute(Q["rotate_dedup_keys"])
    moved = await backfill_history(conn, keep, batch, max_batches)
    return await seed_dedup_keys(conn, batch, max_batches) and moved and finished


# Each final status's history (HISTORY_PARTITIONED is in the order of
# Retention.finals: delivered, dead, cancelled).
HISTORY_OF = dict(zip(("delivered", "dead_letter", "cancelled"), HISTORY_PARTITIONED, strict=True))


async def seed_dedup_keys(
    conn: Conn, batch: int = 10_000, max_batches: int | None = None, step_s: float = 60.0
) -> bool:
    """Writes the dedup keys of the rows history held before schema 027,
    in steps of finished_at sized to about `batch` keys each (a step that
    wrote far fewer doubles, one that wrote more halves), up to
    max_batches short transactions (None: to the end). Returns whether the
    keys are complete."""
    n = 0
    while max_batches is None or n < max_batches:
        wrote = await conn.fetchval(Q["seed_dedup_keys"], step_s)
        if wrote is None:
            return True
        if wrote < batch // 4:
            step_s = min(step_s * 2, 86_400.0)
        elif wrote > batch:
            step_s = max(step_s / 2, 1.0)
        n += 1
    return False


async def backfill_history(
    conn: Conn, retention: Retention, batch: int = 5_000, max_batches: int | None = None
) -> bool:
    """Moves the rows that were final before schema 026 from webhook_live to
    history (past their retention: deleted), up to max_batches short
    transactions (None: to the end). Returns whether the move is done."""
    kept = partitioned_retention(retention)
    n = 0
    while max_batches is None or n < max_batches:
        # The partitions first, each in its own short transaction.
        for row in await conn.fetch(Q["backfill_days"], batch):
            parent = HISTORY_OF[row["status"]]
            keep_s = kept[parent]
            await conn.execute(
                Q["day_partitions"], parent, 0, keep_s, partition_width_s(keep_s), row["since"]
            )
        if await conn.fetchval(Q["backfill_history"], batch, *retention.finals()) is None:
            if n:
                # Just finished: the planner's figures for the tables it
                # emptied and filled (the history's new partitions have
                # none until autovacuum's analyze gets to them).
                await conn.execute("ANALYZE webhook_live")
                await conn.execute("ANALYZE webhook_history")
            return True
        n += 1
    return False


async def table_health(conn: Conn) -> list[TableHealth]:
    rows = await conn.fetch(Q["table_health"], list(HOT_TABLES))
    return [TableHealth(**dict(r)) for r in rows]


async def try_vacuum_lock(conn: Conn) -> bool:
    """A session lock: one worker vacuums at a time (released when its
    dedicated connection closes)."""
    return bool(await conn.fetchval("SELECT pg_try_advisory_lock($1)", VACUUM_LOCK))


async def vacuum(conn: Conn, table: str) -> None:
    """VACUUM (ANALYZE) of one hot table; outside any transaction, so on a
    connection of its own (it may take a while on a large table)."""
    if table not in HOT_TABLES:
        raise ValueError(f"not a table maintenance vacuums: {table!r}")
    await conn.execute(f"VACUUM (ANALYZE) {table}")
