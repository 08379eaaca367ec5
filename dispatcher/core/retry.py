"""Retry policy: classification of an attempt and the backoff schedule.

Pure: no I/O, no clock, no randomness of its own (the caller passes the
random draw), so every branch is testable with plain tables.
"""

from __future__ import annotations

import email.utils
from dataclasses import dataclass
from datetime import UTC

from dispatcher.core.models import Status, Verdict

# A receiver asking for more than a day is treated as asking for a day: the
# row stays visible in `health` instead of vanishing into the far future.
MAX_RETRY_AFTER_S = 86_400.0


def classify_status(status_code: int) -> Verdict:
    """Standard Webhooks / Stripe semantics for an HTTP answer."""
    if 200 <= status_code < 300:
        return Verdict.SUCCESS
    if status_code in (408, 429) or 500 <= status_code < 600:
        return Verdict.RETRYABLE
    # 1xx/3xx (redirects are never followed) and the remaining 4xx will not
    # change by asking again.
    return Verdict.PERMANENT


def parse_retry_after(value: str | None, now_epoch: float) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or HTTP-date)."""
    if value is None:
        return None
    value = value.strip()
    if not value:
        return None
    # RFC 9110 delta-seconds is ASCII DIGIT only; str.isdigit() also accepts
    # e.g. '²', which float() rejects with ValueError.
    if value.isascii() and value.isdigit():
        return min(float(value), MAX_RETRY_AFTER_S)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    delta: float = when.timestamp() - now_epoch
    return min(max(delta, 0.0), MAX_RETRY_AFTER_S)


def backoff_ceiling_s(attempts_made: int, base_s: float, cap_s: float) -> float:
    """Upper bound of the full-jitter window after `attempts_made` attempts.

    The first retry (attempts_made == 1) draws from [0, base]; each further
    attempt doubles the window, until the cap.
    """
    exponent = max(attempts_made - 1, 0)
    # 2**exponent overflows float for silly attempt counts; the cap wins long before.
    if exponent >= 63:
        return cap_s
    return min(cap_s, base_s * float(2**exponent))


@dataclass(frozen=True, kw_only=True, slots=True)
class RetryDecision:
    status: Status
    delay_s: float  # meaningful when status is FAILED


# The final decisions, made once: decide() runs for every attempt.
DELIVERED = RetryDecision(status=Status.DELIVERED, delay_s=0.0)
DEAD = RetryDecision(status=Status.DEAD_LETTER, delay_s=0.0)


def decide(
    *,
    verdict: Verdict,
    attempts_made: int,
    max_attempts: int,
    base_s: float,
    cap_s: float,
    jitter: float,
    retry_after_s: float | None = None,
) -> RetryDecision:
    """What becomes of a delivery after its `attempts_made`-th attempt.

    `jitter` is a uniform draw from [0, 1); full jitter multiplies the whole
    window by it. Retry-After is a floor: we never come back sooner.
    """
    if verdict is Verdict.SUCCESS:
        return DELIVERED
    if verdict is Verdict.PERMANENT or attempts_made >= max_attempts:
        return DEAD
    delay = jitter * backoff_ceiling_s(attempts_made, base_s, cap_s)
    if retry_after_s is not None:
        delay = max(delay, min(retry_after_s, MAX_RETRY_AFTER_S))
    return RetryDecision(status=Status.FAILED, delay_s=delay)
