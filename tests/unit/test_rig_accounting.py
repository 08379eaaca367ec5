"""The cluster rig's accounting (benchmarks/rig/accounting.py): lost,
stall, back and steady from arrival times, on hand-made timelines."""

from __future__ import annotations

import pytest

from benchmarks.rig.accounting import account, stall, steady_from


def stream(start: float, end: float, per_s: int) -> list[float]:
    n = round((end - start) * per_s)
    return [start + i / per_s for i in range(n)]


def test_stall_is_the_longest_gap_counted_from_the_fault() -> None:
    times = [*stream(0, 10, 10), *stream(14, 20, 10)]
    gap, end = stall(times, 10.0, 20.0)
    assert gap == pytest.approx(4.0) and end == 14.0
    # Nothing after the fault: stalled until the window closed.
    gap, end = stall(stream(0, 10, 10), 10.0, 15.0)
    assert gap == pytest.approx(5.0) and end == 15.0


def test_steady_needs_two_full_seconds() -> None:
    times = [*stream(14, 14.5, 100), *stream(16, 20, 100)]
    # From 15.8 on, [t, t+1) holds 80 or more of the 16..20 stream.
    assert steady_from(times, 14.0, 20.0, 80) == pytest.approx(15.8, abs=0.11)
    assert steady_from(times, 14.0, 17.5, 80) is None


@pytest.mark.parametrize(
    ("gap_s", "back_s"),
    [(4.0, 4.1), (0.3, 0.4)],  # a short gap is jitter: back is the next arrival
)
def test_account(gap_s: float, back_s: float) -> None:
    before = stream(0, 10, 10)
    after = [t + gap_s for t in stream(10, 20, 10)][1:]
    ids = {f"e{i}": t for i, t in enumerate(before + after)}
    acked = dict(ids) | {"never": 5.0}
    m = account(acked=acked, phase_ids=set(ids), arrivals=ids, t_fault=10.0, until=20.5, rate=10)
    assert m["enqueued"] == len(ids) + 1 and m["delivered"] == len(ids)
    assert m["lost"] == 1 and m["lost_ids"] == ["never"]
    assert m["back_s"] == pytest.approx(back_s, abs=0.01)
    assert m["steady_s"] is not None and m["steady_s"] >= m["back_s"]
