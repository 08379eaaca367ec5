"""Operational events (SPEC "Operational webhooks"): their types, Svix's
names, and which ones a recorder flush causes.

Pure: the recorder hands in what it wrote (outcomes, endpoints a 410
disabled, breaker transitions) and gets back the events to queue; the
store queues them (schema 011, dispatcher_ops_emit) in the same
transaction. Nothing here knows about ops webhooks' own rows beyond the
ids it is told to skip: an ops webhook's failures never cause ops events.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any, NamedTuple

from dispatcher.core.models import Outcome, Status

ENDPOINT_CREATED = "endpoint.created"
ENDPOINT_UPDATED = "endpoint.updated"
ENDPOINT_DELETED = "endpoint.deleted"
ENDPOINT_DISABLED = "endpoint.disabled"
ENDPOINT_ENABLED = "endpoint.enabled"
ATTEMPT_EXHAUSTED = "message.attempt.exhausted"
ATTEMPT_FAILING = "message.attempt.failing"
ATTEMPT_RECOVERED = "message.attempt.recovered"

# Every type an ops webhook may subscribe to, in the order the docs list them.
EVENT_TYPES: tuple[str, ...] = (
    ENDPOINT_CREATED,
    ENDPOINT_UPDATED,
    ENDPOINT_DELETED,
    ENDPOINT_DISABLED,
    ENDPOINT_ENABLED,
    ATTEMPT_EXHAUSTED,
    ATTEMPT_FAILING,
    ATTEMPT_RECOVERED,
)

# endpoint.disabled's data.reason.
GONE = "gone"  # the receiver answered 410
AUTO = "auto"  # disable_after: too many failures in a row
OPERATOR = "operator"  # the operator or the application, by hand


class OpsEvent(NamedTuple):
    """One event about endpoint `endpoint_id`; `delivery_id` for message.*
    (its event id becomes data.msgId); `extra` merged into data."""

    type: str
    endpoint_id: int
    delivery_id: int | None = None
    extra: dict[str, Any] | None = None


def disabled(endpoint_id: int, reason: str) -> OpsEvent:
    return OpsEvent(ENDPOINT_DISABLED, endpoint_id, extra={"reason": reason})


def of_flush(
    outcomes: Iterable[Outcome],
    gone: Iterable[int],
    transitions: Iterable[tuple[int, str, str]],
    skip: Collection[int],
) -> list[OpsEvent]:
    """The events a flush caused: endpoints a 410 disabled (`gone`: only
    those the flush itself disabled), deliveries that went to dead letter,
    breakers that opened from closed (failing; a failed half-open probe
    re-opens without a new event) or closed again (recovered). `skip`: the
    ops webhooks' own ids."""
    out = [disabled(eid, GONE) for eid in gone if eid not in skip]
    out += [
        OpsEvent(ATTEMPT_EXHAUSTED, o.endpoint_id, o.delivery_id)
        for o in outcomes
        if o.status is Status.DEAD_LETTER and o.endpoint_id not in skip
    ]
    for eid, before, after in transitions:
        if eid in skip:
            continue
        if before == "closed" and after == "open":
            out.append(OpsEvent(ATTEMPT_FAILING, eid))
        elif before != "closed" and after == "closed":
            out.append(OpsEvent(ATTEMPT_RECOVERED, eid))
    return out
