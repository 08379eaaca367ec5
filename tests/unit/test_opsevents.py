"""Which operational events a recorder flush causes (core.opsevents.of_flush)."""

from __future__ import annotations

from dispatcher.core.models import Outcome, Status
from dispatcher.core.opsevents import OpsEvent, of_flush

OPS = 99  # an ops webhook's id: nothing about it is ever emitted


def outcome(delivery: int, endpoint: int, status: Status) -> Outcome:
    return Outcome(delivery, endpoint, status, 0.0, True, status_code=500)


def test_dead_letters_gone_endpoints_and_breakers() -> None:
    outcomes = [
        outcome(1, 7, Status.DEAD_LETTER),
        outcome(2, 7, Status.DELIVERED),
        outcome(3, 8, Status.FAILED),
        outcome(4, OPS, Status.DEAD_LETTER),
    ]
    transitions = [
        (7, "closed", "open"),
        (8, "half_open", "open"),  # a failed probe: still failing, said once already
        (9, "half_open", "closed"),
        (10, "open", "closed"),
        (OPS, "closed", "open"),
    ]
    assert of_flush(outcomes, [8, OPS], transitions, {OPS}) == [
        OpsEvent("endpoint.disabled", 8, extra={"reason": "gone"}),
        OpsEvent("message.attempt.exhausted", 7, 1),
        OpsEvent("message.attempt.failing", 7),
        OpsEvent("message.attempt.recovered", 9),
        OpsEvent("message.attempt.recovered", 10),
    ]


def test_a_quiet_flush_causes_nothing() -> None:
    outcomes = [outcome(1, 7, Status.DELIVERED), outcome(2, 7, Status.FAILED)]
    assert of_flush(outcomes, [], [(7, "open", "half_open")], {OPS}) == []
