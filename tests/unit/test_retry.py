"""Unit tests for dispatcher.core.retry: classification, Retry-After and backoff.

Pure functions only: no network, no database, no clock, no sleeps.
"""

from __future__ import annotations

import email.utils
import math
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from dispatcher.core.models import Status, Verdict
from dispatcher.core.retry import (
    MAX_RETRY_AFTER_S,
    RetryDecision,
    backoff_ceiling_s,
    classify_status,
    decide,
    parse_retry_after,
)

PROPS = settings(max_examples=200, deadline=None, database=None)

# SPEC defaults: base 30 s, cap 3600 s, max_attempts 5.
BASE_S = 30.0
CAP_S = 3600.0
MAX_ATTEMPTS = 5

# A fixed "now" for Retry-After dates: 2015-10-21 07:28:00 UTC.
NOW = datetime(2015, 10, 21, 7, 28, 0, tzinfo=UTC)
NOW_EPOCH = NOW.timestamp()


# --------------------------------------------------------------------------
# classify_status
# --------------------------------------------------------------------------

CLASSIFICATION = [
    # 1xx: informational answers are not a success and will not change.
    (100, Verdict.PERMANENT),
    (101, Verdict.PERMANENT),
    (103, Verdict.PERMANENT),
    (199, Verdict.PERMANENT),
    # 2xx: success, whatever the exact code.
    (200, Verdict.SUCCESS),
    (201, Verdict.SUCCESS),
    (202, Verdict.SUCCESS),
    (204, Verdict.SUCCESS),
    (206, Verdict.SUCCESS),
    (299, Verdict.SUCCESS),
    # 3xx: redirects are never followed; permanent.
    (300, Verdict.PERMANENT),
    (301, Verdict.PERMANENT),
    (302, Verdict.PERMANENT),
    (303, Verdict.PERMANENT),
    (304, Verdict.PERMANENT),
    (307, Verdict.PERMANENT),
    (308, Verdict.PERMANENT),
    (399, Verdict.PERMANENT),
    # 4xx: permanent except 408 and 429.
    (400, Verdict.PERMANENT),
    (401, Verdict.PERMANENT),
    (403, Verdict.PERMANENT),
    (404, Verdict.PERMANENT),
    (405, Verdict.PERMANENT),
    (408, Verdict.RETRYABLE),
    (409, Verdict.PERMANENT),
    (410, Verdict.PERMANENT),
    (413, Verdict.PERMANENT),
    (422, Verdict.PERMANENT),
    (429, Verdict.RETRYABLE),
    (451, Verdict.PERMANENT),
    (499, Verdict.PERMANENT),
    # 5xx: all retryable.
    (500, Verdict.RETRYABLE),
    (501, Verdict.RETRYABLE),
    (502, Verdict.RETRYABLE),
    (503, Verdict.RETRYABLE),
    (504, Verdict.RETRYABLE),
    (507, Verdict.RETRYABLE),
    (520, Verdict.RETRYABLE),
    (599, Verdict.RETRYABLE),
]


@pytest.mark.parametrize(("status_code", "expected"), CLASSIFICATION)
def test_classify_status_table(status_code: int, expected: Verdict) -> None:
    assert classify_status(status_code) is expected


def _expected_verdict(code: int) -> Verdict:
    if 200 <= code <= 299:
        return Verdict.SUCCESS
    if code in (408, 429) or 500 <= code <= 599:
        return Verdict.RETRYABLE
    return Verdict.PERMANENT


@PROPS
@given(st.integers(min_value=100, max_value=599))
def test_classify_status_every_code(code: int) -> None:
    assert classify_status(code) is _expected_verdict(code)


def test_classify_status_exhaustive() -> None:
    for code in range(100, 600):
        assert classify_status(code) is _expected_verdict(code), code


# --------------------------------------------------------------------------
# parse_retry_after
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        ("", None),
        ("   ", None),
        ("\t", None),
        ("0", 0.0),
        ("1", 1.0),
        ("120", 120.0),
        (" 120 ", 120.0),
        ("007", 7.0),
        ("86399", 86_399.0),
        ("86400", MAX_RETRY_AFTER_S),
        ("86401", MAX_RETRY_AFTER_S),
        ("999999999999999999999999999999999999", MAX_RETRY_AFTER_S),
        ("9" * 400, MAX_RETRY_AFTER_S),
        # Not delta-seconds (RFC 9110: 1*DIGIT) and not an HTTP-date.
        ("-5", None),
        ("+5", None),
        ("1.5", None),
        ("1e3", None),
        ("0x10", None),
        ("5 s", None),
        ("soon", None),
        ("abc", None),
        ("Mon, 99 Foo 2015", None),
        # Unicode digits are not ASCII DIGIT; they must not crash the parser.
        ("\u00b2", None),  # superscript two: str.isdigit() but not float()-able
        ("\u00b9\u00b2\u00b3", None),
        ("\u0661\u0662", None),  # Arabic-Indic "12"
        ("\uff11\uff12", None),  # full-width "12"
    ],
)
def test_parse_retry_after_table(value: str | None, expected: float | None) -> None:
    assert parse_retry_after(value, NOW_EPOCH) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        # IMF-fixdate, the preferred HTTP-date form.
        ("Wed, 21 Oct 2015 07:30:00 GMT", 120.0),
        ("Wed, 21 Oct 2015 07:28:00 GMT", 0.0),
        ("Wed, 21 Oct 2015 07:28:01 GMT", 1.0),
        ("Wed, 21 Oct 2015 08:28:00 GMT", 3600.0),
        # In the past: come back now, never a negative delay.
        ("Wed, 21 Oct 2015 07:27:00 GMT", 0.0),
        ("Sun, 06 Nov 1994 08:49:37 GMT", 0.0),
        # Explicit offsets are honoured.
        ("Wed, 21 Oct 2015 09:30:00 +0200", 120.0),
        ("Wed, 21 Oct 2015 02:30:00 -0500", 120.0),
        # -0000 (no zone information) is read as UTC.
        ("Wed, 21 Oct 2015 07:30:00 -0000", 120.0),
        # Obsolete RFC 850 form.
        ("Wednesday, 21-Oct-15 07:30:00 GMT", 120.0),
        # asctime form carries no zone: UTC.
        ("Wed Oct 21 07:30:00 2015", 120.0),
        # More than a day away: capped at a day.
        ("Thu, 22 Oct 2015 07:28:00 GMT", MAX_RETRY_AFTER_S),
        ("Fri, 31 Dec 9999 23:59:59 GMT", MAX_RETRY_AFTER_S),
        # Unrepresentable dates are ignored, not raised.
        ("Wed, 21 Oct 10000 07:28:00 GMT", None),
        ("Wed, 21 Oct 2015 07:28:00 +9999", None),
        ("Wed, 32 Oct 2015 07:28:00 GMT", None),
        ("Wed, 21 Oct 2015 25:28:00 GMT", None),
    ],
)
def test_parse_retry_after_http_date(value: str, expected: float | None) -> None:
    got = parse_retry_after(value, NOW_EPOCH)
    if expected is None:
        assert got is None
    else:
        assert got == pytest.approx(expected)


@PROPS
@given(st.integers(min_value=0, max_value=10**12), st.floats(0, 4e9))
def test_parse_retry_after_delta_seconds(n: int, now: float) -> None:
    got = parse_retry_after(str(n), now)
    assert got == min(float(n), MAX_RETRY_AFTER_S)
    # Surrounding whitespace does not matter.
    assert parse_retry_after(f"  {n}\t", now) == got


@PROPS
@given(
    st.integers(min_value=-10 * 86_400, max_value=10 * 86_400),
    st.integers(min_value=946_684_800, max_value=4_000_000_000),
)
def test_parse_retry_after_http_date_property(offset_s: int, now_s: int) -> None:
    when = datetime.fromtimestamp(now_s + offset_s, tz=UTC)
    header = email.utils.format_datetime(when, usegmt=True)
    got = parse_retry_after(header, float(now_s))
    assert got is not None
    assert got == pytest.approx(min(max(float(offset_s), 0.0), MAX_RETRY_AFTER_S))
    assert 0.0 <= got <= MAX_RETRY_AFTER_S


@PROPS
@given(
    st.text(max_size=64)
    | st.text(st.characters(categories=["Nd", "No", "Nl", "Zs", "Cc"]), max_size=8),
    st.floats(0, 4e9),
)
def test_parse_retry_after_never_raises(value: str, now: float) -> None:
    got = parse_retry_after(value, now)
    assert got is None or (isinstance(got, float) and 0.0 <= got <= MAX_RETRY_AFTER_S)


DATE_TOKENS = [
    *("Mon,", "Wed", "21", "99", "Oct", "Foo", "2015", "10000", "0000", "-1", "07:28:00"),
    *("25:61:61", "GMT", "UTC", "EST", "+0100", "-9999", "+9999", "XYZ", ",", " "),
]


@PROPS
@given(
    st.lists(
        st.sampled_from(DATE_TOKENS),
        max_size=8,
    ),
    st.floats(0, 4e9),
)
def test_parse_retry_after_date_like_garbage_never_raises(parts: list[str], now: float) -> None:
    got = parse_retry_after(" ".join(parts), now)
    assert got is None or 0.0 <= got <= MAX_RETRY_AFTER_S


# --------------------------------------------------------------------------
# backoff_ceiling_s
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("attempts_made", "expected"),
    [
        (0, 30.0),  # clamped: never below the base window
        (1, 30.0),
        (2, 60.0),
        (3, 120.0),
        (4, 240.0),
        (5, 480.0),
        (6, 960.0),
        (7, 1920.0),
        (8, 3600.0),  # 3840 capped
        (9, 3600.0),
        (62, 3600.0),
        (63, 3600.0),
        (64, 3600.0),
        (1000, 3600.0),
        (10**9, 3600.0),
    ],
)
def test_backoff_ceiling_defaults(attempts_made: int, expected: float) -> None:
    assert backoff_ceiling_s(attempts_made, BASE_S, CAP_S) == expected


def test_backoff_ceiling_negative_attempts_clamped() -> None:
    assert backoff_ceiling_s(-3, BASE_S, CAP_S) == BASE_S


def test_backoff_ceiling_base_above_cap() -> None:
    assert backoff_ceiling_s(1, 5000.0, CAP_S) == CAP_S


def test_backoff_ceiling_huge_cap_no_overflow() -> None:
    got = backoff_ceiling_s(10_000, 1.0, math.inf)
    assert got == math.inf or math.isfinite(got)


bases = st.floats(min_value=0.001, max_value=10_000.0, allow_nan=False)
caps = st.floats(min_value=0.001, max_value=1e7, allow_nan=False)
attempt_counts = st.integers(min_value=1, max_value=200)


@PROPS
@given(attempt_counts, bases, caps)
def test_backoff_ceiling_formula(attempts_made: int, base_s: float, cap_s: float) -> None:
    got = backoff_ceiling_s(attempts_made, base_s, cap_s)
    assert got == min(cap_s, base_s * 2.0 ** (attempts_made - 1))
    assert 0.0 < got <= cap_s


@PROPS
@given(attempt_counts, bases, caps)
def test_backoff_ceiling_monotonic(attempts_made: int, base_s: float, cap_s: float) -> None:
    here = backoff_ceiling_s(attempts_made, base_s, cap_s)
    nxt = backoff_ceiling_s(attempts_made + 1, base_s, cap_s)
    assert here <= nxt
    if nxt < cap_s:
        assert nxt == pytest.approx(2 * here)


# --------------------------------------------------------------------------
# decide
# --------------------------------------------------------------------------


def _decide(**overrides: object) -> RetryDecision:
    kwargs: dict[str, object] = {
        "verdict": Verdict.RETRYABLE,
        "attempts_made": 1,
        "max_attempts": MAX_ATTEMPTS,
        "base_s": BASE_S,
        "cap_s": CAP_S,
        "jitter": 0.5,
    }
    kwargs.update(overrides)
    return decide(**kwargs)  # type: ignore[arg-type]


def test_decide_success_is_delivered() -> None:
    d = _decide(verdict=Verdict.SUCCESS)
    assert d.status is Status.DELIVERED
    assert d.delay_s == 0.0


@pytest.mark.parametrize("attempts_made", [1, 4, 5, 6, 100])
def test_decide_success_is_delivered_even_on_last_attempt(attempts_made: int) -> None:
    assert _decide(verdict=Verdict.SUCCESS, attempts_made=attempts_made).status is (
        Status.DELIVERED
    )


@pytest.mark.parametrize("attempts_made", [1, 2, 4])
def test_decide_permanent_dead_letters_at_once(attempts_made: int) -> None:
    d = _decide(verdict=Verdict.PERMANENT, attempts_made=attempts_made, retry_after_s=60.0)
    assert d.status is Status.DEAD_LETTER
    assert d.delay_s == 0.0


@pytest.mark.parametrize(
    ("attempts_made", "status"),
    [
        (1, Status.FAILED),
        (2, Status.FAILED),
        (3, Status.FAILED),
        (4, Status.FAILED),
        (5, Status.DEAD_LETTER),
        (6, Status.DEAD_LETTER),
    ],
)
def test_decide_retryable_default_budget(attempts_made: int, status: Status) -> None:
    assert _decide(attempts_made=attempts_made).status is status


def test_decide_exhausted_ignores_retry_after() -> None:
    d = _decide(attempts_made=MAX_ATTEMPTS, retry_after_s=30.0)
    assert d.status is Status.DEAD_LETTER


@pytest.mark.parametrize(
    ("attempts_made", "jitter", "expected"),
    [
        (1, 0.0, 0.0),
        (1, 0.5, 15.0),
        (1, 0.999, 29.97),
        (2, 0.5, 30.0),
        (3, 0.25, 30.0),
        (4, 1.0 - 2**-53, 240.0 * (1.0 - 2**-53)),
    ],
)
def test_decide_full_jitter_table(attempts_made: int, jitter: float, expected: float) -> None:
    d = _decide(attempts_made=attempts_made, jitter=jitter)
    assert d.status is Status.FAILED
    assert d.delay_s == pytest.approx(expected)


def test_decide_retry_after_is_a_floor() -> None:
    d = _decide(attempts_made=1, jitter=0.1, retry_after_s=600.0)
    assert d.status is Status.FAILED
    assert d.delay_s == 600.0


def test_decide_retry_after_below_jitter_keeps_jitter() -> None:
    d = _decide(attempts_made=3, jitter=0.5, retry_after_s=10.0)
    assert d.delay_s == 60.0


def test_decide_retry_after_above_cap_is_honoured() -> None:
    d = _decide(attempts_made=1, jitter=0.9, retry_after_s=7200.0)
    assert d.delay_s == 7200.0


def test_decide_retry_after_is_bounded_by_a_day() -> None:
    # Documented design: a receiver asking for more than a day is treated as
    # asking for a day (parse_retry_after never yields more anyway).
    d = _decide(attempts_made=1, jitter=0.0, retry_after_s=10 * MAX_RETRY_AFTER_S)
    assert d.delay_s == MAX_RETRY_AFTER_S


jitters = st.floats(min_value=0.0, max_value=1.0, exclude_max=True, allow_nan=False)
verdicts = st.sampled_from(list(Verdict))


@PROPS
@given(
    attempts_made=st.integers(min_value=1, max_value=60),
    max_attempts=st.integers(min_value=1, max_value=60),
    base_s=st.floats(min_value=0.001, max_value=3600.0),
    cap_s=st.floats(min_value=0.001, max_value=86_400.0),
    jitter=jitters,
)
def test_decide_full_jitter_window(
    attempts_made: int, max_attempts: int, base_s: float, cap_s: float, jitter: float
) -> None:
    d = decide(
        verdict=Verdict.RETRYABLE,
        attempts_made=attempts_made,
        max_attempts=max_attempts,
        base_s=base_s,
        cap_s=cap_s,
        jitter=jitter,
    )
    if attempts_made >= max_attempts:
        assert d.status is Status.DEAD_LETTER
        return
    assert d.status is Status.FAILED
    ceiling = min(cap_s, base_s * 2.0 ** (attempts_made - 1))
    assert 0.0 <= d.delay_s <= ceiling
    assert d.delay_s == pytest.approx(jitter * ceiling)


@PROPS
@given(
    attempts_made=st.integers(min_value=1, max_value=60),
    max_attempts=st.integers(min_value=1, max_value=60),
    base_s=st.floats(min_value=0.001, max_value=3600.0),
    cap_s=st.floats(min_value=0.001, max_value=86_400.0),
    jitter=jitters,
    retry_after_s=st.floats(min_value=0.0, max_value=MAX_RETRY_AFTER_S),
)
def test_decide_never_below_retry_after(
    attempts_made: int,
    max_attempts: int,
    base_s: float,
    cap_s: float,
    jitter: float,
    retry_after_s: float,
) -> None:
    assume(attempts_made < max_attempts)
    d = decide(
        verdict=Verdict.RETRYABLE,
        attempts_made=attempts_made,
        max_attempts=max_attempts,
        base_s=base_s,
        cap_s=cap_s,
        jitter=jitter,
        retry_after_s=retry_after_s,
    )
    assert d.status is Status.FAILED
    ceiling = min(cap_s, base_s * 2.0 ** (attempts_made - 1))
    assert d.delay_s >= retry_after_s
    assert d.delay_s == max(retry_after_s, jitter * ceiling)
    assert d.delay_s <= max(retry_after_s, ceiling)


@PROPS
@given(
    verdict=verdicts,
    attempts_made=st.integers(min_value=0, max_value=100),
    max_attempts=st.integers(min_value=0, max_value=100),
    jitter=jitters,
    retry_after_s=st.none() | st.floats(min_value=0.0, max_value=MAX_RETRY_AFTER_S),
)
def test_decide_dead_letter_exactly_when_exhausted_or_permanent(
    verdict: Verdict,
    attempts_made: int,
    max_attempts: int,
    jitter: float,
    retry_after_s: float | None,
) -> None:
    d = decide(
        verdict=verdict,
        attempts_made=attempts_made,
        max_attempts=max_attempts,
        base_s=BASE_S,
        cap_s=CAP_S,
        jitter=jitter,
        retry_after_s=retry_after_s,
    )
    if verdict is Verdict.SUCCESS:
        assert d.status is Status.DELIVERED
    elif verdict is Verdict.PERMANENT or attempts_made >= max_attempts:
        assert d.status is Status.DEAD_LETTER
    else:
        assert d.status is Status.FAILED
        assert d.delay_s >= 0.0
    assert (d.status is Status.DEAD_LETTER) == (
        verdict is not Verdict.SUCCESS
        and (verdict is Verdict.PERMANENT or attempts_made >= max_attempts)
    )
    assert d.status in (Status.DELIVERED, Status.FAILED, Status.DEAD_LETTER)


@PROPS
@given(st.integers(min_value=100, max_value=599), st.integers(min_value=1, max_value=10), jitters)
def test_classify_then_decide_pipeline(code: int, attempts_made: int, jitter: float) -> None:
    verdict = classify_status(code)
    d = decide(
        verdict=verdict,
        attempts_made=attempts_made,
        max_attempts=MAX_ATTEMPTS,
        base_s=BASE_S,
        cap_s=CAP_S,
        jitter=jitter,
    )
    if 200 <= code < 300:
        assert d.status is Status.DELIVERED
    elif code in (408, 429) or code >= 500:
        expected = Status.DEAD_LETTER if attempts_made >= MAX_ATTEMPTS else Status.FAILED
        assert d.status is expected
    else:  # 1xx, 3xx and the other 4xx are permanent
        assert d.status is Status.DEAD_LETTER


def test_retry_decision_is_frozen() -> None:
    d = _decide()
    with pytest.raises(AttributeError):
        d.delay_s = 1.0  # type: ignore[misc]


def test_now_constant_is_consistent() -> None:
    assert datetime.fromtimestamp(NOW_EPOCH, tz=UTC) == NOW
    assert NOW + timedelta(seconds=120) == datetime(2015, 10, 21, 7, 30, tzinfo=UTC)
