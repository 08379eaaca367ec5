"""One claimed row's attempt: gate → prepare → admit → sign and POST → decide.

`deliver` turns a row into its Outcome (and the attempt's result, for the
gate's view): dead at once when the endpoint or the payload cannot be used,
handed back unspent when the gate does not admit it in time, otherwise
sent once and decided by retry.py. It resolves nothing: handing the
outcome on is the engine's (engine.py `_resolve`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from dispatcher import log
from dispatcher.core.models import AttemptResult, Delivery, Outcome, Status, Verdict
from dispatcher.core.retry import decide
from dispatcher.worker.endpointgate import Gate
from dispatcher.worker.sender import Sender


async def deliver(
    gate: Gate,
    d: Delivery,
    sender: Sender,
    stopping: Callable[[], bool],
    draw: Callable[[], float],
) -> tuple[Outcome, AttemptResult | None]:
    """`stopping`: the worker stops (the row then goes back unsent);
    `draw`: the retry delay's jitter."""
    if gate.wire is None:
        return Outcome.unsendable(d, f"endpoint unusable: {gate.broken}"), None
    if d.erased:
        return Outcome.unsendable(d, "payload expunged"), None
    # A payload the endpoint's shape cannot use (a missing macro) is at
    # fault, not the endpoint: dead at once, unsent, unseen by the breaker.
    doc, unusable = gate.wire.prepare(d.body)
    if unusable is not None:
        return Outcome.unsendable(d, unusable), None
    admission = gate.admit(d, stopping)
    admitted = admission.now()
    if admitted is None:
        admitted = await admission.wait()
    try:
        if not admitted:
            return Outcome.handed_back(d, gate.paused_for()), None
        try:
            result = await sender.post(gate.wire, d, doc, breaker=gate.breaker.state._value_)
        except Exception as exc:
            # A bug or a value the wire cannot carry: an attempt that
            # failed (bounded by max_attempts), never a row handed back
            # to be claimed again at once, forever.
            result = _crashed(exc)
    finally:
        admission.leave()
    if result.verdict is Verdict.SUCCESS:
        # Nothing to decide (retry.decide's answer for any success), nor
        # to draw: the common case, without either call.
        return Outcome.attempted(d, result, Status.DELIVERED, 0.0), result
    return _decided(gate, d, result, draw()), result


def _decided(gate: Gate, d: Delivery, r: AttemptResult, jitter: float) -> Outcome:
    ep = gate.endpoint
    decision = decide(
        verdict=r.verdict,
        attempts_made=d.attempt_count + 1,
        max_attempts=d.max_attempts,
        base_s=ep.retry_base_ms / 1000,
        cap_s=ep.retry_cap_ms / 1000,
        jitter=jitter,
        retry_after_s=r.retry_after_s,
    )
    return Outcome.attempted(d, r, decision.status, decision.delay_s)


def _crashed(exc: Exception) -> AttemptResult:
    log.event("attempt_crashed", logging.ERROR, error=log.crash_site(exc))
    return AttemptResult(
        verdict=Verdict.RETRYABLE,
        status_code=None,
        response_ms=0,
        error=f"internal error: {type(exc).__name__}"[:300],
    )
