"""The per-endpoint gate's budget: what a claim may take for one endpoint."""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import replace
from random import Random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dispatcher.core import concurrency
from dispatcher.core.breaker import Breaker, BreakerState
from dispatcher.core.models import AttemptResult, Delivery, Endpoint, Verdict
from dispatcher.core.sendorder import SendOrder
from dispatcher.core.shares import View
from dispatcher.db.store import EndpointState
from dispatcher.worker import admission
from dispatcher.worker.gate import Gate, Gates
from dispatcher.worker.wire import EndpointWire

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


def _gate(**kw: object) -> Gate:
    ep = Endpoint(id=1, url="https://example.com/x", secrets=(SECRET,), **kw)  # type: ignore[arg-type]
    return Gate(ep, EndpointWire(ep.url, ep.secrets, ep.timeout_ms, allow_private=False), Breaker())


async def test_slow_rate_never_claims_rows_that_would_wait_past_their_lease() -> None:
    g = _gate(rate_per_s=1 / 60, burst=2, max_in_flight=10)
    g.adaptive = replace(g.adaptive, limit=10.0)
    # The bucket starts empty (a process does not know what was sent before
    # it started), and its first token is a minute away.
    assert g.budget(time.monotonic()) == 0


async def test_fast_rate_claims_about_a_second_ahead() -> None:
    g = _gate(rate_per_s=50.0, burst=10, max_in_flight=1000)
    g.adaptive = replace(g.adaptive, limit=1000.0)
    assert g.budget(time.monotonic()) in (50, 51)  # empty at first, a second's refill
    await asyncio.sleep(0.5)
    assert g.limiter is not None and g.limiter.tokens() == 10  # the burst caps it
    assert g.budget(time.monotonic()) == 10 + 50


async def test_a_share_resizes_the_bucket_in_place_and_never_adds_tokens() -> None:
    """Rows already waiting for a token go at the new rate, and a resize (a
    worker joined or left) is no free burst. (Bounds from the loop's own
    clock: a loaded machine only stretches the sleeps.)"""
    loop = asyncio.get_running_loop()
    g = _gate(rate_per_s=100.0, burst=100, max_in_flight=10)
    bucket = g.limiter
    assert bucket is not None and bucket.tokens() <= 1  # starts empty
    t0 = loop.time()
    await asyncio.sleep(0.1)
    had = bucket.tokens()
    assert 9 <= had <= 100 * (loop.time() - t0) + 1
    half = View(me="a", live=("a", "b"), applied={"a": ("a", "b"), "b": ("a", "b")})
    g.apply_share(half)
    assert g.limiter is bucket and (bucket.capacity, bucket.rate) == (50, 50.0)
    kept = bucket.tokens()
    assert g.max_share == 5 and min(had, 50) <= kept <= min(had, 50) + 1
    waiting = [asyncio.create_task(bucket.acquire()) for _ in range(kept + 5)]
    await asyncio.sleep(0)
    assert sum(t.done() for t in waiting) >= kept  # what was in the bucket
    # b is not sure to have shrunk: nothing granted, the bucket stays.
    g.apply_share(View(me="a", live=("a", "b"), applied={"a": ("a", "b"), "b": ("b",)}))
    assert g.max_share == 0 and g.budget(time.monotonic()) == 0 and not g.sendable()
    g.apply_share(half)
    t0 = loop.time()
    await asyncio.gather(*waiting)
    # The last few waited at 50 a second (4 gaps of 20 ms), not at 100.
    assert loop.time() - t0 >= 0.07
    g.apply_share(None)
    assert (bucket.capacity, bucket.rate) == (100, 100.0) and bucket.tokens() <= 2


def test_a_newcomer_holds_nothing_until_the_others_made_room() -> None:
    g = _gate(rate_per_s=50.0, max_in_flight=10)
    g.apply_share(View(me="b", live=("a", "b"), applied={"a": ("a",), "b": None}))
    assert g.max_share == 0 and g.budget(time.monotonic()) == 0 and not g.may_probe()


def test_raising_max_in_flight_lifts_the_adaptive_ceiling() -> None:
    g = _gate(max_in_flight=10)
    g.reconfigure(replace(g.endpoint, max_in_flight=100), g.wire)
    assert g.adaptive.max_limit == 100 and g.max_share == 100


def test_paused_and_disabled_endpoints_get_nothing() -> None:
    g = _gate()
    now = time.monotonic()
    assert g.budget(now) > 0
    g.paused_until = now + 5
    assert g.budget(now) == 0
    g.paused_until = 0.0
    g.endpoint = replace(g.endpoint, enabled=False)
    assert g.budget(now) == 0


# ------------------------------------------------------------ places and rows claimed ahead


def _learned(g: Gate, latency_ms: float) -> Gate:
    """The adaptive limit at its top with a learned healthy latency."""
    g.adaptive = replace(g.adaptive, limit=float(g.max_share), baseline_ms=latency_ms,
                         slow_start=False)  # fmt: skip
    return g


def test_rows_are_claimed_ahead_by_about_one_claim_cycle_of_answers() -> None:
    now = time.monotonic()
    assert _gate(max_in_flight=100).budget(now) == concurrency.INITIAL  # nothing learned yet
    assert _learned(_gate(max_in_flight=100), 200.0).budget(now) == 100 + 25
    assert _learned(_gate(max_in_flight=100), 500.0).budget(now) == 100 + 10
    assert _learned(_gate(max_in_flight=100), 1.0).budget(now) == 100 + 100  # at most as many


def test_no_rows_ahead_while_failing_ordered_or_rate_limited() -> None:
    now = time.monotonic()
    failing = _learned(_gate(max_in_flight=100), 200.0)
    failing.breaker = replace(failing.breaker, consecutive_failures=1)
    assert failing.budget(now) == 100
    fifo = _learned(_gate(max_in_flight=100, ordering="fifo"), 200.0)
    assert fifo.budget(now) == 100
    rated = _learned(_gate(max_in_flight=100, rate_per_s=10_000.0), 200.0)
    assert rated.ahead(100) == 0


def _delivery(i: int) -> Delivery:
    return Delivery(id=i, endpoint_id=1, event_id=f"e{i}", body=b"{}", attempt_count=0,
                    max_attempts=3)  # fmt: skip


async def test_places_bound_what_is_sent_and_pass_in_order() -> None:
    g = _learned(_gate(max_in_flight=2), 200.0)
    order: list[int] = []
    release = asyncio.Event()

    async def send(i: int) -> None:
        async with g.admit(_delivery(i), lambda: False) as admitted:
            assert admitted
            order.append(i)
            assert g.sending <= 2
            await release.wait()

    tasks = [asyncio.create_task(send(i)) for i in range(5)]
    await asyncio.sleep(0.01)
    assert order == [0, 1] and g.sending == 2 and len(g.waiting) == 3
    release.set()
    await asyncio.gather(*tasks)
    assert order == [0, 1, 2, 3, 4] and g.sending == 0 and not g.waiting


async def test_a_row_claimed_ahead_goes_back_when_no_place_frees() -> None:
    g = _learned(_gate(max_in_flight=1), 200.0)
    hold = asyncio.Event()

    async def first() -> None:
        async with g.admit(_delivery(1), lambda: False) as admitted:
            assert admitted
            await hold.wait()

    t = asyncio.create_task(first())
    await asyncio.sleep(0)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    async with g.admit(_delivery(2), lambda: False) as admitted:
        assert not admitted  # handed back unspent after PLACE_WAIT_S
    assert loop.time() - t0 >= admission.PLACE_WAIT_S * 0.9
    assert g.sending == 1 and not g.waiting
    hold.set()
    await t
    assert g.sending == 0


async def test_each_waiting_row_waits_its_own_time_on_the_queues_one_timer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Rows that came later go back later, never sooner than their own
    wait; a cancelled one leaves the queue; a place freed meanwhile goes
    to the first still waiting."""
    monkeypatch.setattr(admission, "PLACE_WAIT_S", 0.3)
    g = _learned(_gate(max_in_flight=1), 200.0)
    first = g.admit(_delivery(0), lambda: False)
    assert await first.__aenter__()
    loop = asyncio.get_running_loop()
    ended: dict[int, tuple[bool, float]] = {}

    async def wait(i: int) -> None:
        t0 = loop.time()
        admitted = await g.admit(_delivery(i), lambda: False).__aenter__()
        ended[i] = (admitted, loop.time() - t0)

    a = asyncio.create_task(wait(1))
    await asyncio.sleep(0.1)
    b, c = asyncio.create_task(wait(2)), asyncio.create_task(wait(3))
    await asyncio.sleep(0)
    c.cancel()
    await asyncio.gather(a, b, c, return_exceptions=True)
    assert set(ended) == {1, 2}
    for admitted, waited in ended.values():
        assert not admitted and waited >= 0.3 * 0.9
    assert g.sending == 1 and not g.waiting
    d, e = asyncio.create_task(wait(4)), asyncio.create_task(wait(5))
    await asyncio.sleep(0.05)
    await first.__aexit__()  # the place goes to the first still waiting
    await asyncio.gather(d, e)
    assert ended[4][0] and not ended[5][0]
    assert not g.waiting


async def test_a_waiting_row_cancelled_after_its_place_was_handed_over_gives_it_back() -> None:
    g = _learned(_gate(max_in_flight=1), 200.0)
    first = g.admit(_delivery(1), lambda: False)
    assert await first.__aenter__()
    waiter = asyncio.create_task(g.admit(_delivery(2), lambda: False).__aenter__())
    await asyncio.sleep(0)
    await first.__aexit__()  # hands the place to the waiter...
    waiter.cancel()  # ...which is cancelled before it runs again
    with contextlib.suppress(asyncio.CancelledError):
        await waiter
    assert g.sending == 0 and not g.waiting


# ------------------------------------------------------------ send order


def test_send_order_releases_results_only_in_send_order() -> None:
    order = SendOrder()
    a, b, c = order.sent(0.0), order.sent(0.0), order.sent(0.0)
    assert order.completed(c, False, 0.1) == []  # a and b still on the wire
    assert order.completed(a, True, 0.1) == [True]
    assert order.completed(b, None, 0.1) == [False]  # b never counted; c follows a
    d = order.sent(0.2)
    assert order.completed(d, True, 0.2) == [True]


def test_a_hanging_request_holds_the_order_up_to_its_timeout() -> None:
    """30 % of requests hang until the timeout while the rest answer at once:
    the successes sent after a hung one wait for it, so its timeout is
    counted among them, not in a burst with the other timeouts."""
    order = SendOrder(horizon_s=2.0)
    hanging = order.sent(0.0)
    later = [order.sent(0.1) for _ in range(3)]
    assert order.completed(later[0], True, 0.2) == []
    assert order.completed(later[1], True, 0.3) == []
    assert order.completed(hanging, False, 1.0) == [False, True, True]
    assert order.completed(later[2], True, 1.1) == [True]


def test_one_that_never_reports_is_passed_over_after_the_horizon() -> None:
    order = SendOrder(horizon_s=2.0)
    lost = order.sent(0.0)
    later = [order.sent(0.1) for _ in range(2)]
    assert order.completed(later[0], False, 0.5) == []
    assert order.completed(later[1], False, 2.5) == [False, False]
    assert order.completed(lost, False, 9.0) == [False]  # counted on its own
    nxt = order.sent(9.0)
    assert order.completed(nxt, True, 9.0) == [True]


@settings(max_examples=200, deadline=None, database=None)
@given(st.lists(st.booleans(), min_size=1, max_size=60), st.randoms(use_true_random=False))
def test_send_order_is_a_permutation_back_to_send_order(results: list[bool], rnd: Random) -> None:
    order = SendOrder()
    seqs = [order.sent(0.0) for _ in results]
    finish = list(zip(seqs, results, strict=True))
    rnd.shuffle(finish)
    out: list[bool] = []
    for seq, ok in finish:
        out += order.completed(seq, ok, 0.5)  # all within the horizon
    assert out == results


def _result(ok: bool) -> AttemptResult:
    if ok:
        return AttemptResult(verdict=Verdict.SUCCESS, status_code=200, response_ms=5)
    return AttemptResult(verdict=Verdict.RETRYABLE, status_code=None, response_ms=0, error="reset")


def test_failures_that_finish_first_do_not_open_the_breaker() -> None:
    """30 % resets come back at once while the successes sent between them
    are still on the wire: in completion order they look like a run."""
    g = _gate(failure_threshold=3)
    pattern = [True, False, True, False, False, True, False, True] * 5
    seqs = [g.order.sent(time.monotonic()) for _ in pattern]
    ready: list[bool] = []
    failures_first = [(s, ok) for s, ok in zip(seqs, pattern, strict=True) if not ok] + [
        (s, ok) for s, ok in zip(seqs, pattern, strict=True) if ok
    ]
    for seq, ok in failures_first:
        ready += g.completed(seq, _result(ok), None, 0.0)
        assert g.breaker.state is BreakerState.CLOSED
    assert ready == pattern


def test_a_run_of_failures_in_send_order_opens_the_local_view() -> None:
    g = _gate(failure_threshold=3)
    for _ in range(3):
        g.completed(g.order.sent(time.monotonic()), _result(False), None, 0.0)
    assert g.breaker.state is BreakerState.OPEN
    assert not g.sendable() and g.budget(time.monotonic()) == 0


def test_a_stored_breaker_older_than_the_local_view_does_not_reopen_it() -> None:
    """A refresh (or another flush's write) that read the breaker before this
    process's newest results were stored must not undo what they tripped."""
    g = _gate(failure_threshold=3)
    stale = g.breaker  # as stored: closed, no failures
    for _ in range(3):
        g.completed(g.order.sent(time.monotonic()), _result(False), None, 0.0)
    assert g.breaker.state is BreakerState.OPEN and g.unwritten == 3
    ep = g.endpoint
    g.sync(EndpointState(ep, stale, None, None, 0.0), "w", time.monotonic())
    assert g.breaker.state is BreakerState.OPEN  # the refresh was older: kept
    g.results_written(2, stale)  # an earlier flush: one result still unstored
    assert g.breaker.state is BreakerState.OPEN and g.unwritten == 1
    stored = replace(stale, state=BreakerState.OPEN, opened_at=0.0, consecutive_failures=3)
    g.results_written(1, stored)  # everything stored: the database is the truth again
    assert g.unwritten == 0 and g.breaker == stored
    g.sync(EndpointState(ep, Breaker(), None, None, 0.0), "w", time.monotonic())
    assert g.breaker == Breaker()  # e.g. an operator reset it


def test_probe_lifecycle_goes_through_the_gate() -> None:
    g = _gate()
    g.results_written(0, replace(g.breaker, state=BreakerState.OPEN, opened_at=0.0))
    assert g.may_probe()
    g.probe_won()
    assert g.breaker.state is BreakerState.HALF_OPEN and g.budget(time.monotonic()) == 1
    g.claimed_row()
    assert g.budget(time.monotonic()) == 0  # exactly one probe
    g.released(spent=False)  # went back unsent: it may be claimed again
    assert g.budget(time.monotonic()) == 1
    g.results_written(0, Breaker())
    assert not g.probing and g.budget(time.monotonic()) > 1


def test_gates_registry_adds_updates_and_forgets_endpoints() -> None:
    def wire(ep: Endpoint) -> EndpointWire:
        return EndpointWire(ep.url, ep.secrets, ep.timeout_ms, allow_private=False)

    gates = Gates(wire)
    ep = Endpoint(id=7, url="https://example.com/x", secrets=(SECRET,))
    due = gates.sync([EndpointState(ep, Breaker(), None, None, 0.0)], "w", None)
    assert due == [] and gates.ids == [7] and gates[7].endpoint == ep
    opened = Breaker(state=BreakerState.OPEN, opened_at=0.0)
    moved = replace(ep, url="https://example.com/y")
    two = View(me="w", live=("v", "w"), applied={"v": ("v", "w"), "w": ("v", "w")})
    due = gates.sync([EndpointState(moved, opened, None, 900.0, 2.0)], "w", two)
    g = gates[7]
    assert due == [g] and g.wire.url == moved.url and g.breaker == opened
    assert g.p95_ms == 900.0 and g.paused_for() > 1.0 and g.max_share == 50
    gates.results_written({7: 0, 8: 0}, {7: Breaker(), 8: Breaker()})  # 8 is not ours
    assert g.breaker == Breaker()
    gates.sync([], "w", None)
    assert len(gates) == 0 and gates.ids == []


def test_a_410_outweighs_a_refresh_read_before_it_was_written() -> None:
    """The worker stops sending at its own 410 at once; a refresh that read
    the endpoint enabled before the recorder wrote the disable does not
    start it again, one that reads it disabled ends the hold, and after
    GONE_HOLD_S the database is believed (an operator enabled it again)."""
    gates = Gates(lambda ep: EndpointWire(ep.url, ep.secrets, ep.timeout_ms, allow_private=False))
    ep = Endpoint(id=3, url="https://example.com/x", secrets=(SECRET,))
    gates.sync([EndpointState(ep, Breaker(), None, None, 0.0)], "w", None)
    g = gates[3]
    seq = g.order.sent(time.monotonic())
    gone = AttemptResult(verdict=Verdict.PERMANENT, status_code=410, response_ms=5, gone=True)
    g.completed(seq, gone, None, 0.0)
    assert not g.endpoint.enabled
    gates.sync([EndpointState(ep, Breaker(), None, None, 0.0)], "w", None)  # stale read
    assert not g.endpoint.enabled
    gates.sync([EndpointState(replace(ep, enabled=False), Breaker(), None, None, 0.0)], "w", None)
    assert g.gone_at is None
    gates.sync([EndpointState(ep, Breaker(), None, None, 0.0)], "w", None)  # enabled again
    assert g.endpoint.enabled
