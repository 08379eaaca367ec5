"""The connectivity rule (core/connectivity.py): one line each way per
outage, whatever number of tasks report, and no return believed too soon."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from dispatcher.core.connectivity import SETTLE_S, Link, Said, answered, failed


def _fail(link: Link, now: float, started: float, refused: bool = False) -> tuple[Link, list[Said]]:
    return failed(link, now=now, started=started, where="t", error="e", refused=refused)


def _names(said: list[Said]) -> list[str]:
    return [s.event for s in said]


def test_an_outage_is_said_once_and_its_end_once() -> None:
    link, said = _fail(Link(), 10.0, 9.9)
    assert _names(said) == ["database_lost"]
    for t in (10.1, 10.2, 10.3):  # other tasks see it too
        link, said = _fail(link, t, t - 0.05)
        assert said == []
    link, said = answered(link, now=20.0, started=19.99, wrote=False)
    assert said == [] and not link.up  # settling
    link, said = answered(link, now=20.0 + SETTLE_S, started=20.0 + SETTLE_S - 0.01, wrote=True)
    assert said == [Said("database_back", {"down_s": 10.0})] and link.up


def test_an_answer_to_a_query_sent_before_the_loss_is_not_a_return() -> None:
    link, _ = _fail(Link(), 10.0, 9.9)
    # 20 ms after the loss, a task whose query went out before it succeeds.
    link, said = answered(link, now=10.02, started=9.95, wrote=True)
    link, said2 = answered(link, now=12.0, started=9.95, wrote=True)
    assert said == said2 == [] and not link.up


def test_one_lucky_answer_between_failures_is_not_a_return() -> None:
    link, _ = _fail(Link(), 10.0, 9.9)
    t = 10.0
    for _ in range(40):  # a flapping database: answer, fail, answer, fail...
        t += 0.25
        link, said = answered(link, now=t, started=t - 0.01, wrote=False)
        assert said == []
        t += 0.25
        link, said = _fail(link, t, t - 0.01)
        assert said == []
    assert not link.up and link.outages == 1


def test_a_failure_begun_before_the_return_is_old_news() -> None:
    link, _ = _fail(Link(), 10.0, 9.9)
    link, _ = answered(link, now=11.0, started=10.9, wrote=False)
    link, said = answered(link, now=13.0, started=12.9, wrote=False)
    assert _names(said) == ["database_back"]
    # A statement stuck in the outage times out after the return.
    link, said = _fail(link, 13.5, 10.5)
    assert said == [] and link.up


def test_a_full_disk_is_refusing_writes_not_an_outage() -> None:
    """The case that logged a lost/back pair four times a second: reads work,
    every write fails with disk_full."""
    link = Link()
    names: list[str] = []
    t = 0.0
    for _ in range(160):
        t += 0.25
        link, said = answered(link, now=t, started=t - 0.01, wrote=False)  # the prober
        names += _names(said)
        link, said = _fail(link, t + 0.1, t + 0.09, refused=True)  # a flush
        names += _names(said)
    assert names == ["database_refusing_writes"] and link.up
    link, said = answered(link, now=t + 1, started=t + 0.9, wrote=False)
    assert said == []  # a read says nothing about writes
    link, said = answered(link, now=t + 2, started=t + 1.9, wrote=True)
    assert _names(said) == ["database_accepting_writes"] and not link.refusing


def test_a_refusal_is_an_answer_that_can_end_an_outage() -> None:
    link, _ = _fail(Link(), 10.0, 9.9)
    link, said = _fail(link, 11.0, 10.9, refused=True)
    assert _names(said) == ["database_refusing_writes"]
    link, said = _fail(link, 11.0 + SETTLE_S, 11.0 + SETTLE_S, refused=True)
    assert _names(said) == ["database_back"] and link.up and link.refusing


# A report: (seconds since the last one, how long the round trip took,
# failed / refused / answered a read / answered a write).
_REPORTS = st.lists(
    st.tuples(
        st.floats(0, 3), st.floats(0, 15), st.sampled_from(["fail", "refused", "read", "write"])
    ),
    max_size=300,
)


@given(_REPORTS)
def test_lines_alternate_whatever_the_reports(reports: list[tuple[float, float, str]]) -> None:
    link = Link()
    now = 0.0
    outage: list[str] = []
    refusal: list[str] = []
    last_fresh_answer: float | None = None
    for gap, took, kind in reports:
        now += gap
        started = now - took
        if kind in ("fail", "refused"):
            link, said = _fail(link, now, started, refused=kind == "refused")
        else:
            link, said = answered(link, now=now, started=started, wrote=kind == "write")
        for s in said:
            if s.event in ("database_lost", "database_back"):
                outage.append(s.event)
            else:
                refusal.append(s.event)
            if s.event == "database_back":
                # Believed only after a fresh answer a settle time earlier.
                assert last_fresh_answer is not None
                assert float(s.fields["down_s"]) >= 0
        if kind != "fail" and not link.up and started >= link.lost_at:
            last_fresh_answer = now
        assert link.up == (not outage or outage[-1] == "database_back")
        assert link.refusing == (bool(refusal) and refusal[-1] == "database_refusing_writes")
    assert outage == ["database_lost", "database_back"] * (len(outage) // 2) + (
        ["database_lost"] if len(outage) % 2 else []
    )
    assert refusal == ["database_refusing_writes", "database_accepting_writes"] * (
        len(refusal) // 2
    ) + (["database_refusing_writes"] if len(refusal) % 2 else [])
    assert link.outages == outage.count("database_lost")
