"""How reports read in a terminal: the text forms of `endpoint list`,
`alerts`, `health` and `dlq analyze` (their --json forms are the documents
as returned). Apart from main.py so that the parser and the views change
independently."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from dispatcher.cli.format import print_table

ENDPOINT_COLUMNS = ["id", "app", "name", "kind", "url", "enabled", "event_types", "method",
                    "filter", "ordering", "rate_per_s", "max_in_flight", "timeout_ms",
                    "max_attempts"]  # fmt: skip


def endpoint_list(rows: list[dict[str, Any]]) -> None:
    for r in rows:
        if r.get("ordering") == "fifo" and r.get("ordering_key"):
            r["ordering"] = f"fifo by {r['ordering_key']}"
    print_table(rows, ENDPOINT_COLUMNS, headers={"event_types": "event types"},
                cap={"filter": 40, "event_types": 40})  # fmt: skip


def alerts(doc: dict[str, dict[str, Any]]) -> None:
    """Each alert's value and threshold with their units."""
    rows = []
    for name, a in doc.items():
        value, threshold = a.get("value"), a.get("threshold")
        if name == "dead_letters_rising":
            value = f"{value} dead letters in the last hour"
            threshold = f"{threshold} in the hour before"
        elif name == "oldest_pending":
            value = "nothing pending" if value is None else f"{value:g} s old"
            threshold = f"{threshold:g} s"
        elif name == "slow_endpoints":
            value = f"endpoints {', '.join(map(str, value))}" if value else "none"
            threshold = f"p95 over {threshold:g} ms (20+ samples)"
        rows.append({"alert": name, "firing": a.get("firing"), "value": value,
                     "threshold": threshold})  # fmt: skip
    print_table(rows, ["alert", "firing", "value", "threshold"])


DLQ_COLUMNS = ["endpoint_id", "app", "dead", "primary_status_code", "primary_error",
               "avg_attempts", "pattern", "last_at"]  # fmt: skip
DLQ_HEADERS = {"endpoint_id": "endpoint", "primary_status_code": "status",
               "primary_error": "error", "avg_attempts": "attempts", "last_at": "last"}  # fmt: skip


def dlq_analyze(rows: list[dict[str, Any]], columns: list[str] = DLQ_COLUMNS) -> None:
    """One row per endpoint, its suggested action on the lines under it."""
    for r in rows:
        if isinstance(r.get("last_at"), datetime):
            r["last_at"] = r["last_at"].strftime("%m-%d %H:%M")  # UTC, as the database has it
    print_table(rows, columns, headers=DLQ_HEADERS, cap={"primary_error": 24, "app": 12},
                after="suggested_action")  # fmt: skip


# health: a figure a line, a few with what they count (docs/operations/
# metrics.md), so that `oldest_pending` beside `pending 0` reads as what it
# is: the oldest row not yet delivered, in whichever live state it is.
HEALTH_NOTES = {
    "awaiting_retry": "failed, a retry scheduled",
    "dead_letter": "`dispatcher dlq list` lists them",
    "failed_last_hour": "latest attempt failed within the hour: retrying or dead",
    "workers_silent": "lost their database, or died",
    "outcomes_waiting": "held by the workers, not yet written",
}
_OLDEST_OF = {"pending": "the oldest pending row",
              "awaiting_retry": "the oldest row awaiting retry",
              "in_flight": "the oldest row in flight"}  # fmt: skip


def _ago(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def _oldest(doc: dict[str, Any], now: datetime) -> str:
    at = doc.get("oldest_pending")
    if not isinstance(at, datetime):
        return "- (nothing undelivered is due)"
    states = [key for key in _OLDEST_OF if doc.get(key)]
    which = _OLDEST_OF[states[0]] if len(states) == 1 else "the oldest row not yet delivered"
    when = at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return f"{when}, {_ago(max(0.0, (now - at).total_seconds()))} ago: {which}"


def _figure(key: str, value: Any) -> str:
    if value is None:
        return "-"
    if key == "avg_delivery_ms_last_hour":
        return f"{value:.1f} ms"
    note = HEALTH_NOTES.get(key) if value else None  # what a 0 counts needs no words
    return f"{value}  ({note})" if note else str(value)


def health(doc: dict[str, Any], now: datetime | None = None) -> None:
    """`dispatcher health`: one figure a line, a few with a note."""
    width = max(map(len, doc))
    now = now or datetime.now(UTC)
    for key, value in doc.items():
        text = _oldest(doc, now) if key == "oldest_pending" else _figure(key, value)
        print(f"{key:<{width}}  {text}")
