"""Typed rows: what the catalog hands to the service layer and the entry points.

Stdlib only. Each class mirrors one query's columns, so a renamed column
fails loudly at the boundary instead of deep inside a renderer.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from dispatcher.core.models import EndpointSettings


@dataclass(frozen=True, kw_only=True, slots=True)
class EndpointRecord(EndpointSettings):
    """A stored endpoint; its secret stays sealed (see secretbox)."""

    id: int
    url: str
    sealed_secret: str
    application_id: str
    name: str | None
    description: str | None
    enabled: bool
    disabled_reason: str | None
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, kw_only=True, slots=True)
class EndpointHealth:
    endpoint_id: int
    app: str
    name: str | None
    url: str
    enabled: bool
    state: str
    consecutive_failures: int
    failure_threshold: int
    opened_at: datetime | None
    cooldown_seconds: float
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    sample_count: int
    last_failure_at: datetime | None
    last_success_at: datetime | None
    max_in_flight: int
    rate_per_s: float | None
    burst: int | None
    attempts_last_hour: int
    success_rate_last_hour: float | None  # share of those attempts answered 2xx


@dataclass(frozen=True, kw_only=True, slots=True)
class HealthSummary:
    pending: int
    awaiting_retry: int
    in_flight: int
    dead_letter: int
    delivered_last_hour: int
    failed_last_hour: int
    oldest_pending: datetime | None
    avg_delivery_ms_last_hour: float | None
    workers_live: int
    workers_silent: int
    outcomes_waiting: int
    held: int = 0  # held until released (not pending: never claimed)


@dataclass(frozen=True, kw_only=True, slots=True)
class DeadLetterGroup:
    """Dead letters of one endpoint, with the counts the pattern analysis reads."""

    endpoint_id: int
    dead: int
    primary_error: str | None
    primary_status_code: int | None
    first_at: datetime
    last_at: datetime
    avg_attempts: float
    # When letters died (epoch s: a five-minute bucket's start, or a letter's
    # own time at the span's edge), and how many then.
    times: list[float]
    time_counts: list[int]
    codes: list[int]  # the last status codes, most frequent first
    code_counts: list[int]
    success_share: float | None  # 2xx share of the endpoint's attempts meanwhile
    app: str | None


@dataclass(frozen=True, kw_only=True, slots=True)
class DeadLetter:
    id: int
    endpoint_id: int
    event_id: str
    event_type: str
    attempt_count: int
    created_at: datetime
    dead_at: datetime
    last_error: str | None
    last_status_code: int | None
    last_response_ms: int | None
    payload_expired: bool = False  # erased (schema 022): it cannot be replayed


@dataclass(frozen=True, kw_only=True, slots=True)
class Attempt:
    delivery_id: int
    at: datetime
    status_code: int | None
    response_ms: int
    error: str | None
    detail: str | None = None  # core.attemptdetail's record (JSON), schema 024


@dataclass(frozen=True, kw_only=True, slots=True)
class DeliveryView:
    id: int
    endpoint_id: int
    event_id: str
    event_type: str
    status: str
    attempt_count: int
    max_attempts: int
    created_at: datetime
    next_attempt_at: datetime
    delivered_at: datetime | None
    last_error: str | None
    last_status_code: int | None
    last_response_ms: int | None


@dataclass(frozen=True, kw_only=True, slots=True)
class BrowsedDelivery:
    """A row of the deliveries browser: a delivery with its application."""

    id: int
    endpoint_id: int
    app: str
    event_id: str
    event_type: str
    status: str
    attempt_count: int
    max_attempts: int
    created_at: datetime
    next_attempt_at: datetime
    delivered_at: datetime | None
    updated_at: datetime
    last_error: str | None
    last_status_code: int | None
    last_response_ms: int | None
    payload_expired: bool = False  # erased (schema 022): it cannot be resent or replayed


@dataclass(frozen=True, kw_only=True, slots=True)
class AlertInputs:
    dead_last_hour: int
    dead_prev_hour: int
    oldest_pending_age_s: float | None
    retry_window_s: float | None


@dataclass(frozen=True, kw_only=True, slots=True)
class QueueGauges:
    """What /metrics reads from the database on each scrape."""

    pending: int
    failed: int
    in_flight: int
    dead_letter: int
    oldest_pending_s: float | None
    # The oldest transaction (or prepared transaction) holding back the
    # xmin horizon, in seconds; None: none open.
    oldest_xmin_s: float | None
    closed: int
    open: int
    half_open: int


@dataclass(frozen=True, kw_only=True, slots=True)
class TimelinePoint:
    ago: int
    enqueued: int
    delivered: int
    dead: int


@dataclass(frozen=True, kw_only=True, slots=True)
class LatencyPoint:
    """One endpoint's attempts in one bucket: percentiles (None when it had
    none) and how many failed."""

    ago: int
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    attempts: int
    failures: int


@dataclass(frozen=True, kw_only=True, slots=True)
class BreakerTransition:
    from_state: str
    to_state: str
    cooldown_seconds: float | None
    at: datetime


@dataclass(frozen=True, kw_only=True, slots=True)
class FailedAttempt:
    delivery_id: int | None
    event_id: str | None
    event_type: str | None
    at: datetime
    status_code: int | None
    response_ms: int
    error: str | None


def as_dict(row: Any) -> dict[str, Any]:
    """A row as a JSON-ready dict (for the entry points' renderers)."""
    return asdict(row)


@dataclass(frozen=True, kw_only=True, slots=True)
class OpsWebhook:
    """A stored operational webhook (schema 011); its secret stays sealed."""

    id: int
    url: str
    sealed_secret: str
    app: str | None  # None: the operator's, told about every application
    event_types: tuple[str, ...]  # ("*",): every type
    description: str | None
    enabled: bool
    disabled_reason: str | None
    created_at: datetime
    updated_at: datetime
