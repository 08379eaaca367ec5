"""Dead letters as a data set: which pattern an endpoint's dead letters form.

Pure: timestamps (epoch seconds) and status codes in, or their counts, a
pattern name and the action a person should take out.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

CLUSTER_WINDOW_S = 3600.0
CLUSTER_SHARE = 0.8
CLUSTER_MIN = 10  # fewer than this is not "many"
CODE_SHARE = 0.6


@dataclass(frozen=True, kw_only=True, slots=True)
class Pattern:
    # "refused-target" | "missing-macro" | "status-code" | "cluster" | "gradual" | "none"
    name: str
    action: str


def _max_in_window(when: Sequence[tuple[float, int]], window: float) -> int:
    """The most letters within `window` seconds of one another; `when`:
    (time, letters at that time), in time order."""
    best = 0
    inside = 0
    lo = 0
    for t, k in when:
        inside += k
        while t - when[lo][0] > window:
            inside -= when[lo][1]
            lo += 1
        best = max(best, inside)
    return best


REFUSED_PREFIX = "refused target"  # the sender's last_error for an SSRF refusal
MISSING_MACRO_PREFIX = "missing macro:"  # shaping.MissingMacro
# An endpoint that answered 2xx to this share of its attempts while these
# died was flaky, not down: its dead letters are "gradual" however clustered.
UP_SHARE = 0.2


def _failed_alike(counted: Counter[int], n: int, replay: str) -> Pattern | None:
    """For an endpoint that answered none of its attempts with 2xx over the
    span these letters died in: one status code ended (nearly) all of them,
    so the receiver is broken, not flaky, and more attempts or a longer
    timeout would fail the same way."""
    if not counted:
        return None
    code, hits = counted.most_common(1)[0]
    if hits < CODE_SHARE * n:
        return None
    said = (
        f"every attempt failed with HTTP {code}"
        if hits == n
        else f"no attempt succeeded; {hits} of {n} ended with HTTP {code}"
    )
    return Pattern(name="status-code", action=f"{said}: fix the receiver, then {replay}")


def replay_command(endpoint_id: int | None, since: float | None) -> str:
    """The command a person types next, runnable as printed when the
    endpoint and the first dead letter's time are known."""
    endpoint = "ID" if endpoint_id is None else str(endpoint_id)
    cmd = f"dispatcher dlq replay --endpoint {endpoint}"
    if since is not None:
        at = datetime.fromtimestamp(int(since), tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        cmd += f" --since {at}"
    return cmd


def classify(
    times: Sequence[float],
    codes: Sequence[int | None],
    *,
    primary_error: str | None = None,
    success_share: float | None = None,
    endpoint_id: int | None = None,
) -> Pattern:
    """`times`/`codes`: when each dead letter died and its last status code;
    `primary_error`: their most common last_error; `success_share`: the
    share of the endpoint's attempts answered 2xx over the same span (None:
    not known, and then no claim is made about every attempt)."""
    return classify_counted(
        sorted(Counter(times).items()),
        Counter(c for c in codes if c is not None),
        first_at=min(times, default=None),
        primary_error=primary_error,
        success_share=success_share,
        endpoint_id=endpoint_id,
    )


def classify_counted(
    when: Sequence[tuple[float, int]],
    counted: Counter[int],
    *,
    first_at: float | None,
    primary_error: str | None = None,
    success_share: float | None = None,
    endpoint_id: int | None = None,
) -> Pattern:
    """`classify` from counts, as the database hands them over: `when`, in
    time order, how many letters died at each time (a five-minute bucket's
    start, so a cluster's hour may reach up to five minutes further);
    `counted`, how many ended with each status code. The work is bounded by
    the buckets in the span, not by the letters."""
    n = sum(k for _, k in when)
    if n == 0:
        return Pattern(name="none", action="nothing to do")
    replay = f"`{replay_command(endpoint_id, first_at)}`"
    if primary_error is not None and primary_error.startswith(REFUSED_PREFIX):
        return Pattern(
            name="refused-target",
            action=(
                "the SSRF guard refused this endpoint's address (loopback, private or "
                "link-local): point the endpoint at a public URL, or set "
                "DISPATCHER_ALLOW_PRIVATE_TARGETS=1 on the worker if private targets are "
                f"intended; then {replay}"
            ),
        )
    if primary_error is not None and primary_error.startswith(MISSING_MACRO_PREFIX):
        field = primary_error.removeprefix(MISSING_MACRO_PREFIX).strip()
        return Pattern(
            name="missing-macro",
            action=(
                f"events lack the field {field} the endpoint's URL template needs: fix the "
                f"producer (or the template), then {replay}"
            ),
        )
    if counted:
        code, hits = counted.most_common(1)[0]
        if hits >= CODE_SHARE * n and 400 <= code < 500 and code not in (408,):
            if code in (401, 403):
                action = (
                    f"{code} spike: the receiver's credentials or our secret changed; "
                    f"fix them, then {replay}"
                )
            elif code == 429:
                action = f"429 throttling: lower this endpoint's rate_per_s / burst, then {replay}"
            elif code == 410:
                action = "410 Gone: the receiver retired this URL; update or delete the endpoint"
            else:
                action = (
                    f"{code} from the receiver: fix the URL or the payload contract, then {replay}"
                )
            return Pattern(name="status-code", action=action)
    if success_share == 0 and (alike := _failed_alike(counted, n, replay)) is not None:
        return alike
    was_up = success_share is not None and success_share >= UP_SHARE
    if (
        not was_up
        and n >= CLUSTER_MIN
        and _max_in_window(when, CLUSTER_WINDOW_S) >= CLUSTER_SHARE * n
    ):
        return Pattern(
            name="cluster",
            action=f"endpoint was down longer than the retry window: once it is back, {replay}",
        )
    if success_share == 0 and not counted and primary_error is not None:
        # No answer at all, too few letters or too spread out for a cluster:
        # SPEC's patterns are cluster / status-code / gradual, so it is
        # named gradual, and the action says what it is.
        return Pattern(
            name="gradual",
            action=(
                f"no attempt succeeded (last error: {primary_error}): the receiver is "
                f"down or unreachable; once it answers, {replay}"
            ),
        )
    if was_up:
        share = f"{success_share:.0%}"
        action = (
            f"intermittent failures (the endpoint answered 2xx to {share} of attempts "
            "meanwhile): raise max_attempts or retry_cap_ms so retries outlast them"
        )
    else:
        action = "occasional failures spread out: raise max_attempts or lower timeout_ms"
    return Pattern(name="gradual", action=action)
