"""The per-endpoint gate's budget: what a claim may take for one endpoint."""

from __future__ import annotations

import time
from dataclasses import replace

from dispatcher.breaker import Breaker
from dispatcher.gate import Gate
from dispatcher.models import Endpoint
from dispatcher.sender import EndpointWire

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


def _gate(**kw: object) -> Gate:
    ep = Endpoint(id=1, url="https://example.com/x", secrets=(SECRET,), **kw)  # type: ignore[arg-type]
    return Gate(ep, EndpointWire(ep.url, ep.secrets, ep.timeout_ms, allow_private=False), Breaker())


async def test_slow_rate_never_claims_rows_that_would_wait_past_their_lease() -> None:
    g = _gate(rate_per_s=1 / 60, burst=2, max_in_flight=10)
    g.adaptive = replace(g.adaptive, limit=10.0)
    assert g.budget(time.monotonic()) == 2  # two tokens in the bucket, none refilling soon
    assert g.limiter is not None
    await g.limiter.acquire()
    await g.limiter.acquire()
    assert g.budget(time.monotonic()) == 0  # the next token is a minute away


async def test_fast_rate_claims_about_a_second_ahead() -> None:
    g = _gate(rate_per_s=50.0, burst=10, max_in_flight=1000)
    g.adaptive = replace(g.adaptive, limit=1000.0)
    assert g.budget(time.monotonic()) == 10 + 50


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
