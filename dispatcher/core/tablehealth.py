"""Whether a hot table needs a VACUUM from us: a pure decision.

Every delivery leaves two or three dead row versions in webhook_live (the
claim and the outcome are updates) and retention deletes the rest; the
attempt log's default partition is pruned by delete too. Autovacuum cleans that up where it runs,
but it may be off for the server (as on the machines the soak ran on) or
for the table, and a queue must not depend on a setting it cannot see: with
it off, webhook_queue grew 14 -> 166 MB with a million dead rows in six
minutes. So maintenance reads pg_stat_user_tables and vacuums itself when
autovacuum will not, with autovacuum's own rule (a base plus a share of the
live rows); where autovacuum is on it only steps in when autovacuum has
fallen far behind.
"""

from __future__ import annotations

from dataclasses import dataclass

# The tables maintenance looks after: the only names VACUUM is ever run on.
# The queue's table (schema 025: `webhook_queue` is a view over it). The
# attempt log's days are insert-only and dropped whole (schema 023): only
# its default partition is pruned by delete.
HOT_TABLES = ("webhook_live", "endpoint_latency_default")

# Vacuum when dead rows pass BASE + SCALE x live rows (autovacuum's shape;
# schema 005 sets the same order of thresholds for autovacuum).
BASE_DEAD = 5_000
SCALE = 0.02
# Where autovacuum is on, step in only past this multiple of the threshold
# and when it has not run for a while.
BEHIND_FACTOR = 10
BEHIND_AFTER_S = 600.0


@dataclass(frozen=True, kw_only=True, slots=True)
class TableHealth:
    table: str
    live: int
    dead: int
    autovacuum_on: bool  # the server's setting and the table's own
    since_vacuum_s: float | None  # since the last vacuum of either kind; None: never
    total_bytes: int = 0
    vacuum_count: int = 0
    autovacuum_count: int = 0


def threshold(live: int) -> float:
    return BASE_DEAD + SCALE * max(live, 0)


def vacuum_due(h: TableHealth) -> bool:
    limit = threshold(h.live)
    if not h.autovacuum_on:
        return h.dead >= limit
    stale = h.since_vacuum_s is None or h.since_vacuum_s >= BEHIND_AFTER_S
    return h.dead >= BEHIND_FACTOR * limit and stale
