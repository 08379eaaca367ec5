"""When maintenance vacuums a hot table itself: the pure rule."""

from __future__ import annotations

from dispatcher.core.tablehealth import TableHealth, threshold, vacuum_due


def _h(dead: int, *, live: int = 100_000, on: bool, since: float | None = None) -> TableHealth:
    return TableHealth(
        table="webhook_queue", live=live, dead=dead, autovacuum_on=on, since_vacuum_s=since
    )


def test_vacuum_due_policy() -> None:
    limit = threshold(100_000)
    assert limit == 7_000
    assert not vacuum_due(_h(6_999, on=False))
    assert vacuum_due(_h(7_000, on=False))
    # With autovacuum on, only when it is far behind and has not run lately.
    assert not vacuum_due(_h(7_000, on=True, since=5.0))
    assert not vacuum_due(_h(100_000, on=True, since=5.0))
    assert vacuum_due(_h(70_000, on=True, since=3600.0))
    assert vacuum_due(_h(70_000, on=True, since=None))
