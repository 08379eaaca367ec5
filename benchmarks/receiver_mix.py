"""How the benchmark receiver answers each POST: its delay and, on a seeded
share of POSTs, a fault; and the TLS context it serves https with.

Draws only (seeded, reproducible); receiver.py applies them to the wire.

Delays: a fixed `--latency-ms`, or `--latency-lognormal P50:P99` (ms), a
lognormal distribution with that median and 99th percentile (real
receivers' latencies have a long right tail), or `--latency-uniform LO:HI`
(ms), every delay in that range equally likely (a mix of fast and slow
receivers behind one endpoint). Faults: `--fault KIND
--fault-share F`, or a mix `--mix KIND=SHARE,...`, drawn independently per
POST. Kinds:

    reset   drop the connection without an answer
    cut     a 200 whose body stops short of its content-length, then close
    hang    never answer (the client's timeout ends it)
    500     answer 500
    5xx     answer 500, 502 or 504
    429     answer 429 with `retry-after: 1`
"""

from __future__ import annotations

import math
import random
import ssl
from collections.abc import Sequence
from pathlib import Path

KINDS = ("reset", "cut", "hang", "500", "5xx", "429")
Z99 = 2.3263478740408408  # the standard normal's 99th percentile
RETRY_AFTER_S = 1
MAX_DELAY_S = 600.0


def lognormal(p50_ms: float, p99_ms: float) -> tuple[float, float]:
    """(mu, sigma) of the lognormal with that median and p99, in seconds."""
    if not 0 < p50_ms <= p99_ms:
        raise ValueError("lognormal needs 0 < p50 <= p99")
    return math.log(p50_ms / 1000), math.log(p99_ms / p50_ms) / Z99


def _ms_pair(text: str, names: str) -> tuple[float, float]:
    """`A:B` in ms -> (a, b); `names` ("P50:P99") for the message."""
    a, sep, b = text.partition(":")
    try:
        if not sep:
            raise ValueError
        return float(a), float(b)
    except ValueError:
        raise ValueError(f"expected {names} in ms, got {text!r}") from None


def parse_lognormal(text: str) -> tuple[float, float]:
    """`P50:P99` in ms -> (p50, p99)."""
    pair = _ms_pair(text, "P50:P99")
    lognormal(*pair)
    return pair


def parse_uniform(text: str) -> tuple[float, float]:
    """`LO:HI` in ms -> (lo, hi), 0 <= lo <= hi <= MAX_DELAY_S in ms."""
    lo, hi = _ms_pair(text, "LO:HI")
    if not 0 <= lo <= hi <= MAX_DELAY_S * 1000:
        raise ValueError(f"expected LO:HI in ms with 0 <= LO <= HI, got {text!r}")
    return lo, hi


def parse_mix(text: str) -> list[tuple[str, float]]:
    """`hang=0.01,5xx=0.02,429=0.005` -> [(kind, share)], shares summing to <= 1."""
    out = []
    for part in text.split(","):
        if not part.strip():
            continue
        kind, sep, share = part.strip().partition("=")
        if not sep or kind not in KINDS:
            raise ValueError(f"expected KIND=SHARE with KIND in {', '.join(KINDS)}: {part!r}")
        try:
            f = float(share)
        except ValueError:
            raise ValueError(f"{part!r}: the share must be a number") from None
        if not 0 <= f <= 1:
            raise ValueError(f"{part!r}: the share must be 0..1")
        out.append((kind, f))
    if sum(f for _, f in out) > 1:
        raise ValueError("the shares add up to more than 1")
    return out


class Behaviour:
    """The delay and fault of each POST, drawn from one seeded generator."""

    __slots__ = ("_cumulative", "_latency_s", "_lognormal", "_rng", "_uniform")

    def __init__(
        self,
        *,
        latency_s: float = 0.0,
        lognormal_ms: tuple[float, float] | None = None,
        uniform_ms: tuple[float, float] | None = None,
        faults: Sequence[tuple[str, float]] = (),
        seed: int = 7,
    ) -> None:
        self._rng = random.Random(seed)
        self._latency_s = latency_s
        self._uniform = None if uniform_ms is None else (uniform_ms[0] / 1000, uniform_ms[1] / 1000)
        self._lognormal = None if lognormal_ms is None else lognormal(*lognormal_ms)
        self._cumulative: list[tuple[float, str]] = []
        total = 0.0
        for kind, share in faults:
            if share > 0:
                total += share
                self._cumulative.append((total, kind))

    def delay(self) -> float:
        if self._uniform is not None:
            return self._rng.uniform(*self._uniform)
        if self._lognormal is None:
            return self._latency_s
        mu, sigma = self._lognormal
        return min(self._rng.lognormvariate(mu, sigma), MAX_DELAY_S)

    def fault(self) -> str | None:
        if not self._cumulative:
            return None
        r = self._rng.random()
        for edge, kind in self._cumulative:
            if r < edge:
                return kind
        return None

    def error_status(self) -> int:
        """The status of a `5xx` answer."""
        return self._rng.choice((500, 502, 504))


def server_tls(cert: Path, key: Path) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(str(cert), str(key))
    return ctx
