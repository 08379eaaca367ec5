"""Dead-letter pattern classification (pure)."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dispatcher.core.dlq import _max_in_window, classify, classify_counted

H = 3600.0


@pytest.mark.parametrize(
    ("times", "codes", "pattern", "hint"),
    [
        ([0.0] * 5, [401] * 5, "status-code", "credentials"),
        ([i * H * 5 for i in range(5)], [403, 403, 403, 500, None], "status-code", "credentials"),
        ([0.0] * 8, [429] * 8, "status-code", "rate_per_s"),
        ([0.0] * 3, [410] * 3, "status-code", "410"),
        ([0.0] * 3, [404] * 3, "status-code", "404"),
        ([i * 60.0 for i in range(20)], [500] * 20, "cluster", "replay"),
        ([i * 60.0 for i in range(20)], [None] * 20, "cluster", "replay"),
        ([i * 4 * H for i in range(6)], [500] * 6, "gradual", "max_attempts"),
        ([0.0, 10.0], [503, 503], "gradual", "max_attempts"),
        ([i * 60.0 for i in range(9)], [502] * 9, "gradual", "max_attempts"),
        ([], [], "none", "nothing"),
    ],
)
def test_patterns(times: list[float], codes: list[int | None], pattern: str, hint: str) -> None:
    p = classify(times, codes)
    assert p.name == pattern
    assert hint in p.action


def test_408_is_not_a_status_code_pattern() -> None:
    assert classify([0.0] * 12, [408] * 12).name == "cluster"


@given(
    st.lists(
        st.tuples(st.floats(0, 30 * 24 * H), st.one_of(st.none(), st.integers(100, 599))),
        max_size=60,
    )
)
def test_always_one_of_the_patterns(rows: list[tuple[float, int | None]]) -> None:
    p = classify([t for t, _ in rows], [c for _, c in rows])
    assert p.name in ({"none"} if not rows else {"cluster", "status-code", "gradual"})
    assert p.action


def test_refused_targets_are_their_own_pattern_and_name_the_setting() -> None:
    p = classify(
        [0.0] * 3,
        [None] * 3,
        primary_error="refused target: localhost resolves to a non-public address (127.0.0.1)",
        endpoint_id=7,
    )
    assert p.name == "refused-target"
    assert "DISPATCHER_ALLOW_PRIVATE_TARGETS=1" in p.action
    assert "dispatcher dlq replay --endpoint 7 --since 1970-01-01T00:00:00Z" in p.action


def test_a_cluster_from_an_endpoint_that_mostly_answered_is_intermittent_not_down() -> None:
    times = [i * 60.0 for i in range(20)]
    assert classify(times, [500] * 20, success_share=0.05).name == "cluster"
    flaky = classify(times, [500] * 20, success_share=0.6)
    assert flaky.name == "gradual"
    assert "60%" in flaky.action and "down" not in flaky.action


def test_replay_commands_are_runnable_as_printed() -> None:
    # 2026-11-30T12:00:00.9Z: floored, so the first dead letter is included.
    first = 1_796_040_000.9
    p = classify([first + i * 60.0 for i in range(12)], [None] * 12, endpoint_id=3)
    assert p.name == "cluster"
    assert "`dispatcher dlq replay --endpoint 3 --since 2026-11-30T12:00:00Z`" in p.action
    assert "ID" not in p.action and "FIRST" not in p.action
    for code in (401, 429, 404):
        assert "--endpoint 3 --since" in classify([first], [code], endpoint_id=3).action


@given(
    st.lists(st.floats(0, 30 * 24 * H), min_size=1, max_size=30),
    st.one_of(st.none(), st.floats(0, 1)),
    st.integers(1, 10**9),
)
def test_suggested_commands_never_carry_placeholders(
    times: list[float], share: float | None, endpoint_id: int
) -> None:
    p = classify(times, [500] * len(times), success_share=share, endpoint_id=endpoint_id)
    assert "ID" not in p.action and "FIRST" not in p.action


def test_missing_macros_name_the_field_and_the_fix() -> None:
    p = classify([0.0] * 4, [None] * 4, primary_error="missing macro: click_id", endpoint_id=2)
    assert p.name == "missing-macro"
    assert "click_id" in p.action and "dispatcher dlq replay --endpoint 2" in p.action


def test_every_attempt_failing_alike_names_the_code_not_gradual() -> None:
    # Issue 37: 3 dead letters of 3 attempts each, every one HTTP 500, and
    # the endpoint answered none of its attempts with 2xx meanwhile.
    p = classify([0.0, 60.0, 120.0], [500] * 3, success_share=0.0, endpoint_id=4)
    assert p.name == "status-code"
    assert p.action.startswith("every attempt failed with HTTP 500: fix the receiver, then ")
    assert "`dispatcher dlq replay --endpoint 4 --since 1970-01-01T00:00:00Z`" in p.action
    assert "max_attempts" not in p.action and "timeout_ms" not in p.action
    # Spread out over days, or clustered: the same fact, the same fix.
    assert classify([i * 5 * H for i in range(6)], [503] * 6, success_share=0.0).name == (
        "status-code"
    )
    assert "HTTP 502" in classify([i * 60.0 for i in range(20)], [502] * 20, success_share=0).action
    mostly = classify([0.0] * 5, [500, 500, 500, 500, None], success_share=0.0)
    assert mostly.action.startswith("no attempt succeeded; 4 of 5 ended with HTTP 500")


def test_failing_alike_needs_to_know_nothing_succeeded() -> None:
    # Unknown (no attempt counted) or some 2xx meanwhile: no claim about every attempt.
    assert classify([0.0, 60.0, 120.0], [500] * 3).name == "gradual"
    assert classify([0.0, 60.0, 120.0], [500] * 3, success_share=0.1).name == "gradual"
    # Mixed codes: no single one to name.
    assert classify([0.0] * 4, [500, 502, 503, 504], success_share=0.0).name == "gradual"


def test_no_answer_at_all_says_down_unless_a_cluster() -> None:
    p = classify([0.0, 4 * H], [None] * 2, primary_error="connection refused", success_share=0.0)
    assert p.name == "gradual"  # SPEC's three names (refused targets aside)
    assert "connection refused" in p.action and "once it answers" in p.action
    many = classify([i * 60.0 for i in range(12)], [None] * 12,
                    primary_error="timeout after 15000 ms", success_share=0.0)  # fmt: skip
    assert many.name == "cluster"


@given(st.lists(st.integers(0, 5 * 3600), max_size=80), st.integers(1, 3600))
def test_the_counted_window_counts_what_a_pairwise_look_counts(
    times: list[int], window: int
) -> None:
    # Letters at the same second folded into one count, as the database
    # hands them over: the most within `window` of one another is the same.
    pairwise = max((sum(1 for u in times if 0 <= u - t <= window) for t in times), default=0)
    assert _max_in_window(sorted(Counter(map(float, times)).items()), window) == pairwise


def test_counted_and_listed_letters_classify_alike() -> None:
    times = [i * 60.0 for i in range(20)]
    listed = classify(times, [500] * 20, endpoint_id=5)
    counted = classify_counted(
        [(t, 1) for t in times], Counter({500: 20}), first_at=0.0, endpoint_id=5
    )
    assert counted == listed
