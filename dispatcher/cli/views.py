"""How reports read in a terminal: the text forms of `endpoint list`,
`alerts` and `dlq analyze` (their --json forms are the documents as
returned). Apart from main.py so that the parser and the views change
independently."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from dispatcher.cli.format import print_table

ENDPOINT_COLUMNS = ["id", "app", "name", "url", "enabled", "event_types", "method", "filter",
                    "ordering", "rate_per_s", "max_in_flight", "timeout_ms",
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
