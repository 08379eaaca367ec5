"""Prometheus metrics: the only module that imports prometheus_client.

Labels are bounded: outcome and status names, breaker states; never endpoint
ids (a deployment with 10,000 endpoints must not get 10,000 series).
Queue-shaped gauges are read from the database at scrape time, so `serve`
reports them without running an engine.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import operator
from collections import Counter as Tally
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import HistogramMetricFamily, Metric

from dispatcher.core.models import Outcome
from dispatcher.core.rows import QueueGauges

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 30, 60)
_LAG_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 24 * 3600)

CONTENT_TYPE = CONTENT_TYPE_LATEST

# A flush's outcomes are counted with map, zip and a tally, in C: a loop
# in Python cost a few lines a delivery, the worker's own cost.
_STATUS = operator.attrgetter("status")
_SPENT = operator.attrgetter("spent_attempt")
_MS = operator.attrgetter("response_ms")
_ENDPOINT = operator.attrgetter("endpoint_id")
_TIMING = operator.attrgetter("timing")
_IS_SET = functools.partial(operator.is_not, None)


class _Batched:
    """What the batched histograms share: their name, help and bounds, and
    the registering (once they can be collected: `_start` first)."""

    def __init__(
        self, name: str, doc: str, buckets: tuple[float, ...], registry: CollectorRegistry
    ) -> None:
        self._name = name
        self._doc = doc
        self._bounds = list(buckets)
        self._start()
        registry.register(self)

    def _start(self) -> None:
        raise NotImplementedError

    def collect(self) -> Iterator[Metric]:
        raise NotImplementedError


class BatchHistogram(_Batched):
    """A histogram fed a flush's values at once.

    prometheus_client's Histogram takes a lock, scans the buckets and bumps
    three values per observation: a few microseconds on every attempt and
    every delivery's lag. Here a flush's values cost one bisect each; the
    event loop is the only writer. Exposed as an ordinary histogram.
    """

    def _start(self) -> None:
        self._counts = [0] * (len(self._bounds) + 1)  # the last: above every bound
        self._sum = 0.0

    def observe_many(self, values: Iterable[float]) -> None:
        values = values if isinstance(values, list) else list(values)
        counts = self._counts
        # le: the first bound >= v (bisect_left)
        for i, n in Tally(map(bisect.bisect_left, itertools.repeat(self._bounds), values)).items():
            counts[i] += n
        # Added in order, as one observe() after another would.
        self._sum = functools.reduce(operator.add, values, self._sum)

    def collect(self) -> Iterator[Metric]:
        cumulative = list(itertools.accumulate(self._counts))
        # repr of a float is how prometheus_client spells these bounds.
        les = [repr(float(b)) for b in self._bounds] + ["+Inf"]
        yield HistogramMetricFamily(
            self._name, self._doc, buckets=list(zip(les, cumulative, strict=True)),
            sum_value=self._sum,
        )  # fmt: skip


class EndpointBatchHistograms(_Batched):
    """BatchHistogram's counts per endpoint (label `endpoint`), fed a
    flush's values at once: one dict lookup and one bisect a value."""

    def _start(self) -> None:
        self._series: dict[str, tuple[list[int], list[float]]] = {}

    def observe_many(self, endpoints: Sequence[int], values: Sequence[float]) -> None:
        """`values[i]` was seen at `endpoints[i]`."""
        bounds = self._bounds
        buckets = map(bisect.bisect_left, itertools.repeat(bounds), values)
        for (endpoint, i), n in Tally(zip(endpoints, buckets, strict=True)).items():
            self._series_of(endpoint)[0][i] += n
        if len(set(endpoints)) == 1:  # one endpoint's flush, the common case
            total = self._series_of(endpoints[0])[1]
            total[0] = functools.reduce(operator.add, values, total[0])
            return
        for endpoint, v in zip(endpoints, values, strict=True):
            self._series_of(endpoint)[1][0] += v

    def _series_of(self, endpoint: int) -> tuple[list[int], list[float]]:
        got = self._series.get(key := str(endpoint))
        if got is None:
            got = self._series[key] = ([0] * (len(self._bounds) + 1), [0.0])
        return got

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(self._name, self._doc, labels=["endpoint"])
        les = [repr(float(b)) for b in self._bounds] + ["+Inf"]
        for endpoint, (counts, total) in sorted(self._series.items()):
            cumulative = list(itertools.accumulate(counts))
            family.add_metric([endpoint], list(zip(les, cumulative, strict=True)), total[0])
        yield family


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.deliveries = Counter(
            "dispatcher_deliveries", "Attempt outcomes", ["outcome"], registry=r
        )
        self.attempt_seconds = BatchHistogram(
            "dispatcher_attempt_seconds", "HTTP attempt latency", _LATENCY_BUCKETS, r
        )
        # The phases an attempt's record times (SPEC "Traces and attempt
        # details"), per endpoint: the TCP connect and the TLS handshake (new
        # connections only) and the first byte.
        self.connect_seconds = EndpointBatchHistograms(
            "dispatcher_attempt_connect_seconds",
            "The TCP connect of a connection opened for an attempt", _LATENCY_BUCKETS, r,
        )  # fmt: skip
        self.tls_seconds = EndpointBatchHistograms(
            "dispatcher_attempt_tls_seconds",
            "The TLS handshake of a connection opened for an attempt", _LATENCY_BUCKETS, r,
        )  # fmt: skip
        self.first_byte_seconds = EndpointBatchHistograms(
            "dispatcher_attempt_first_byte_seconds",
            "From sending to the response's status line", _LATENCY_BUCKETS, r,
        )  # fmt: skip
        self.lag_seconds = BatchHistogram(
            "dispatcher_end_to_end_lag_seconds", "Created to delivered", _LAG_BUCKETS, r
        )
        self.in_flight = Gauge("dispatcher_in_flight", "Rows claimed by this process", registry=r)
        self.claim_seconds = Histogram(
            "dispatcher_claim_seconds", "Claim statement duration", registry=r
        )
        self.flush_seconds = Histogram(
            "dispatcher_flush_seconds", "Outcome flush duration", registry=r
        )
        self.queue_depth = Gauge("dispatcher_queue_depth", "Rows by status", ["status"], registry=r)
        self.oldest_pending = Gauge(
            "dispatcher_oldest_pending_seconds", "Age of the oldest undelivered row", registry=r
        )
        # Vacuum's enemy: a transaction that holds back the xmin horizon
        # keeps every dead row of every queue table, however often
        # autovacuum runs (docs/operations/metrics.md).
        self.oldest_xmin = Gauge(
            "dispatcher_oldest_xmin_seconds",
            "Age of the oldest transaction holding back the database's xmin horizon",
            registry=r,
        )
        self.breakers = Gauge(
            "dispatcher_breakers", "Endpoints by breaker state", ["state"], registry=r
        )
        self.alert = Gauge("dispatcher_alert_firing", "Alert conditions", ["alert"], registry=r)
        self.database_connected = Gauge(
            "dispatcher_database_connected", "1 while this worker reaches its database", registry=r
        )
        self.database_connected.set(1)
        self.outcomes_waiting = Gauge(
            "dispatcher_outcomes_waiting", "Outcomes not yet written to the database", registry=r
        )

    def watch_worker(self, connected: Callable[[], bool], waiting: Callable[[], int]) -> None:
        """The worker's own state, read at each scrape."""
        self.database_connected.set_function(lambda: 1.0 if connected() else 0.0)
        self.outcomes_waiting.set_function(lambda: float(waiting()))

    def record_outcomes(self, outcomes: Sequence[Outcome]) -> None:
        """A flush's outcomes: counted by status (a row handed back unsent
        as `released`), their attempts' latency observed."""
        kinds = zip(map(_STATUS, outcomes), map(_SPENT, outcomes), strict=True)
        for (status, spent), n in Tally(kinds).items():
            self.deliveries.labels(status._value_ if spent else "released").inc(n)
        answered = filter(_IS_SET, map(_MS, outcomes))
        seconds = map(operator.truediv, answered, itertools.repeat(1000))
        self.attempt_seconds.observe_many(list(seconds))
        timed = itertools.compress(outcomes, map(_IS_SET, map(_TIMING, outcomes)))
        self._record_timings(list(timed))

    def _record_timings(self, timed: list[Outcome]) -> None:
        """The phases of answered attempts, per endpoint: the connect and
        TLS only for attempts that opened a connection (core.models.Timing)."""
        if not timed:
            return
        endpoints = list(map(_ENDPOINT, timed))
        _, connects, handshakes, firsts = zip(*map(_TIMING, timed), strict=True)
        self.first_byte_seconds.observe_many(endpoints, firsts)
        for histograms, phase in ((self.connect_seconds, connects), (self.tls_seconds, handshakes)):
            opened = list(map(_IS_SET, phase))
            if any(opened):
                histograms.observe_many(list(itertools.compress(endpoints, opened)),
                                        list(itertools.compress(phase, opened)))  # fmt: skip

    def record_lags(self, lags: Iterable[float]) -> None:
        self.lag_seconds.observe_many(lags)

    def set_database_view(self, g: QueueGauges, alerts: dict[str, dict[str, Any]]) -> None:
        # Live statuses only: counting the delivered history at every scrape
        # would cost a scan; deliveries_total{outcome="delivered"} has it.
        depth = {"pending": g.pending, "in_flight": g.in_flight, "failed": g.failed,
                 "dead_letter": g.dead_letter}  # fmt: skip
        for status, n in depth.items():
            self.queue_depth.labels(status).set(n)
        self.oldest_pending.set(g.oldest_pending_s or 0.0)
        self.oldest_xmin.set(g.oldest_xmin_s or 0.0)
        for state, n in (("closed", g.closed), ("open", g.open), ("half_open", g.half_open)):
            self.breakers.labels(state).set(n)
        for name, a in alerts.items():
            self.alert.labels(name).set(1 if a["firing"] else 0)

    def render(self) -> bytes:
        return generate_latest(self.registry)
