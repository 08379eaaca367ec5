"""The batched histogram reads exactly like prometheus_client's own."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from dispatcher.core.models import Outcome, Status
from dispatcher.metrics import (
    _LAG_BUCKETS,
    _LATENCY_BUCKETS,
    BatchHistogram,
    EndpointBatchHistograms,
    Metrics,
)
from tests.unit.strategies import outcomes

BOUNDS = st.sampled_from([_LATENCY_BUCKETS, _LAG_BUCKETS])
VALUES = st.lists(
    st.one_of(
        st.floats(min_value=0, max_value=200_000, allow_nan=False),
        st.sampled_from([*_LATENCY_BUCKETS, *_LAG_BUCKETS]),  # on a bound: le is inclusive
    ),
    max_size=60,
)


def _lines(registry: CollectorRegistry) -> list[str]:
    return [
        line
        for line in generate_latest(registry).decode().splitlines()
        if "_created" not in line and not line.split(" ")[0].endswith("_sum")
    ]


def _sum(registry: CollectorRegistry) -> float:
    text = generate_latest(registry).decode()
    return float(next(x for x in text.splitlines() if "_sum " in x).rsplit(" ", 1)[1])


@given(bounds=BOUNDS, batches=st.lists(VALUES, max_size=4))
def test_batched_histogram_renders_as_prometheus_client_does(
    bounds: tuple[float, ...], batches: list[list[float]]
) -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    batched = BatchHistogram("h_seconds", "doc", bounds, ours)
    reference = Histogram("h_seconds", "doc", buckets=bounds, registry=theirs)
    for batch in batches:
        batched.observe_many(batch)
        for v in batch:
            reference.observe(v)
    assert _lines(ours) == _lines(theirs)
    # Sums are added in another order: equal up to rounding.
    assert abs(_sum(ours) - _sum(theirs)) <= 1e-9 * max(1.0, abs(_sum(theirs)))


@given(batches=st.lists(st.lists(st.tuples(st.integers(1, 4), st.floats(0, 100)),
                                 max_size=30), max_size=4))  # fmt: skip
def test_per_endpoint_histograms_render_as_labelled_prometheus_client_ones(
    batches: list[list[tuple[int, float]]],
) -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    batched = EndpointBatchHistograms("h_seconds", "doc", _LATENCY_BUCKETS, ours)
    reference = Histogram("h_seconds", "doc", ["endpoint"], buckets=_LATENCY_BUCKETS,
                          registry=theirs)  # fmt: skip
    for batch in batches:
        batched.observe_many([e for e, _ in batch], [v for _, v in batch])
        for endpoint, v in batch:
            reference.labels(str(endpoint)).observe(v)
    assert sorted(_lines(ours)) == sorted(_lines(theirs))


def _sample(text: str, name: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name + "{") or line.startswith(name + " "))  # fmt: skip


@given(flushes=st.lists(outcomes(40), max_size=3))
def test_a_flushs_outcomes_are_counted_as_one_by_one(flushes: list[list[Outcome]]) -> None:
    """Tallied in C (map, zip, a Counter): the same figures as counting each
    outcome, its latency and its phases in turn."""
    m = Metrics()
    for batch in flushes:
        m.record_outcomes(batch)
    text = m.render().decode()
    every = [o for batch in flushes for o in batch]
    for label in {"released", *Status}:
        want = sum(1 for o in every if (o.status.value if o.spent_attempt else "released") == label)
        got = [line for line in text.splitlines()
               if line.startswith(f'dispatcher_deliveries_total{{outcome="{label}"}}')]  # fmt: skip
        assert (float(got[0].rsplit(" ", 1)[1]) if got else 0.0) == want
    answered = [o for o in every if o.response_ms is not None]
    assert _sample(text, "dispatcher_attempt_seconds_count") == len(answered)
    timed = [o for o in every if o.timing is not None]
    assert _sample(text, "dispatcher_attempt_first_byte_seconds_count") == len(timed)
    opened = [o for o in timed if o.timing is not None and o.timing[1] is not None]
    assert _sample(text, "dispatcher_attempt_connect_seconds_count") == len(opened)
    shook = [o for o in timed if o.timing is not None and o.timing[2] is not None]
    assert _sample(text, "dispatcher_attempt_tls_seconds_count") == len(shook)
