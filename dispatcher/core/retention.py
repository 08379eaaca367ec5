"""How long each growing table keeps what it holds (SPEC "History, payloads
and retention"): one figure per table, in seconds, 0 keeping it forever.

Pure policy: settings.py reads the variables, db/upkeep.maintain applies the
figures in bounded batches.
"""

from __future__ import annotations

from dataclasses import dataclass

DAY_S = 24 * 3600.0


@dataclass(frozen=True, kw_only=True, slots=True)
class Retention:
    """How long each growing table keeps a row, in seconds; 0 keeps it
    forever. Maintenance removes what is past it in bounded batches."""

    delivered_s: float = 7 * DAY_S
    dead_s: float = 30 * DAY_S
    cancelled_s: float = 7 * DAY_S
    # A final delivery's payload (and its Svix message's), erased while the
    # row stays: it then shows payload_expired and is never sent again.
    payload_s: float = 90 * DAY_S
    attempts_s: float = 7 * DAY_S  # the attempt log (endpoint_latency)
    messages_s: float = 90 * DAY_S  # the Svix API's messages
    transitions_s: float = 30 * DAY_S  # breaker transitions
    idempotency_s: float = DAY_S  # Idempotency-Key answers
    portal_s: float = DAY_S  # portal codes and sessions, after they expire

    @staticmethod
    def kept(seconds: float) -> float | None:
        """The cut-off for SQL: None (keep forever) for 0."""
        return seconds if seconds > 0 else None

    def finals(self) -> tuple[float | None, float | None, float | None]:
        """The queue's final rows' cut-offs: delivered, dead, cancelled."""
        return self.kept(self.delivered_s), self.kept(self.dead_s), self.kept(self.cancelled_s)

    def dedup_window(self, window_s: float) -> float:
        """How long an event id stays taken after its delivery became final:
        DISPATCHER_DEDUP_WINDOW_S, cut to the shortest retention of final
        rows (an id whose row is gone is new again, as it was when history
        itself was asked; and the window's keys then take no more room
        than the rows they stand for)."""
        return min((window_s, *(s for s in self.finals() if s is not None)))

    def payloads_outlive_rows(self) -> bool:
        """Whether some final row can outlive its payload's retention: only
        then has maintenance payloads to erase in the queue (by default
        every final row is deleted, 7 or 30 days, before its payload's 90)."""
        payload = self.kept(self.payload_s)
        return payload is not None and any(s is None or s > payload for s in self.finals())


# Partition widths of the time-partitioned tables (schema 023, 025, 026),
# widest first: each table's is the widest at most a quarter of its
# retention, so a partition dropped whole keeps no row more than a quarter
# past it; a day when kept forever or for four days and more.
PARTITION_WIDTHS_S = (86_400, 3_600, 300)
# Partitions made ahead of the one holding now: three days, or an hour of
# the narrower ones (a worker down that long finds its partition; what
# falls past them meanwhile waits in the default partition).
DAYS_AHEAD = 3
NARROW_AHEAD = 12


def partition_width_s(keep_s: float | None) -> int:
    """The partition width for a retention (None: kept forever)."""
    if keep_s is None:
        return PARTITION_WIDTHS_S[0]
    return next((w for w in PARTITION_WIDTHS_S if w <= keep_s / 4), PARTITION_WIDTHS_S[-1])


def partitions_ahead(width_s: int) -> int:
    return DAYS_AHEAD if width_s >= PARTITION_WIDTHS_S[0] else NARROW_AHEAD


RETENTION_VARIABLES = {  # each Retention field's variable, spelt out for grep
    "delivered_s": "DISPATCHER_RETENTION_DELIVERED_S",
    "dead_s": "DISPATCHER_RETENTION_DEAD_S",
    "cancelled_s": "DISPATCHER_RETENTION_CANCELLED_S",
    "payload_s": "DISPATCHER_RETENTION_PAYLOAD_S",
    "attempts_s": "DISPATCHER_RETENTION_ATTEMPTS_S",
    "messages_s": "DISPATCHER_RETENTION_MESSAGES_S",
    "transitions_s": "DISPATCHER_RETENTION_TRANSITIONS_S",
    "idempotency_s": "DISPATCHER_RETENTION_IDEMPOTENCY_S",
    "portal_s": "DISPATCHER_RETENTION_PORTAL_S",
}
RETENTION_NAMES = tuple(RETENTION_VARIABLES)

# (variable, what it does, its default): settings.ENVIRONMENT's entries,
# and so docs/operations/configuration.md's.
RETENTION_HELP: tuple[tuple[str, str, str], ...] = (
    (
        "DISPATCHER_RETENTION_DELIVERED_S",
        "delivered rows older than this (since delivered) go, with their history partition"
        " (production.md); 0 keeps them",
        "604800 (7 days)",
    ),
    (
        "DISPATCHER_RETENTION_DEAD_S",
        "dead letters older than this (since they died) go, with their history partition;"
        " 0 keeps them",
        "2592000 (30 days)",
    ),
    (
        "DISPATCHER_RETENTION_CANCELLED_S",
        "cancelled rows older than this (since cancelled) go, with their history partition;"
        " 0 keeps them",
        "604800 (7 days)",
    ),
    (
        "DISPATCHER_RETENTION_PAYLOAD_S",
        "payloads of final deliveries (and of Svix messages) older than this (since enqueued)"
        " are erased while the rows stay (the payload store's days, schema 025, are dropped"
        " whole; a delivery still to be sent keeps its payload): such a delivery shows"
        " `payload_expired: true` and"
        " cannot be resent or replayed; 0 keeps them. It matters when a row outlives it (a"
        " retention above, or 0)",
        "7776000 (90 days)",
    ),
    (
        "DISPATCHER_RETENTION_ATTEMPTS_S",
        "attempts (the attempt log, `endpoint_latency`) older than this are deleted; 0 keeps"
        " them. Percentiles do not need them (per-minute histograms)",
        "604800 (7 days)",
    ),
    (
        "DISPATCHER_RETENTION_MESSAGES_S",
        "Svix-API messages older than this are deleted, unless a delivery of theirs is still"
        " to be made; 0 keeps them",
        "7776000 (90 days)",
    ),
    (
        "DISPATCHER_RETENTION_TRANSITIONS_S",
        "breaker transitions older than this are deleted; 0 keeps them",
        "2592000 (30 days)",
    ),
    (
        "DISPATCHER_RETENTION_IDEMPOTENCY_S",
        "Idempotency-Key rows are deleted this long after they were made; an answer is"
        " replayed for 24 h at most (SPEC), and a key deleted sooner is new again",
        "86400 (24 h)",
    ),
    (
        "DISPATCHER_RETENTION_PORTAL_S",
        "portal sign-in codes and sessions are deleted this long after they expire",
        "86400 (24 h)",
    ),
)
