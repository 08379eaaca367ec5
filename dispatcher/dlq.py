"""Dead letters as a data set: which pattern an endpoint's dead letters form.

Pure: timestamps (epoch seconds) and status codes in, a pattern name and the
action a person should take out.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

CLUSTER_WINDOW_S = 3600.0
CLUSTER_SHARE = 0.8
CLUSTER_MIN = 10  # fewer than this is not "many"
CODE_SHARE = 0.6


@dataclass(frozen=True, kw_only=True, slots=True)
class Pattern:
    name: str  # "cluster" | "status-code" | "gradual"
    action: str


def _max_in_window(times: Sequence[float], window: float) -> int:
    ts = sorted(times)
    best = 0
    lo = 0
    for hi, t in enumerate(ts):
        while t - ts[lo] > window:
            lo += 1
        best = max(best, hi - lo + 1)
    return best


def classify(times: Sequence[float], codes: Sequence[int | None]) -> Pattern:
    n = len(times)
    if n == 0:
        return Pattern(name="none", action="nothing to do")
    counted = Counter(c for c in codes if c is not None)
    if counted:
        code, hits = counted.most_common(1)[0]
        if hits >= CODE_SHARE * n and 400 <= code < 500 and code not in (408,):
            if code in (401, 403):
                action = (
                    f"{code} spike: the receiver's credentials or our secret changed; "
                    "fix them, then replay"
                )
            elif code == 429:
                action = "429 throttling: lower this endpoint's rate_per_s / burst, then replay"
            elif code == 410:
                action = "410 Gone: the receiver retired this URL; update or delete the endpoint"
            else:
                action = (
                    f"{code} from the receiver: fix the URL or the payload contract, then replay"
                )
            return Pattern(name="status-code", action=action)
    if n >= CLUSTER_MIN and _max_in_window(times, CLUSTER_WINDOW_S) >= CLUSTER_SHARE * n:
        return Pattern(
            name="cluster",
            action=(
                "endpoint was down longer than the retry window: once it is back, "
                "replay with `dlq replay --endpoint ID --since FIRST`"
            ),
        )
    return Pattern(
        name="gradual",
        action="occasional failures spread out: raise max_attempts or lower timeout_ms",
    )
