"""slow200: receivers answering after 200 ms, with the worker's default settings.

4 endpoints x max_in_flight 1000 (what the receivers allow), `run --drain`
with no --max-in-flight: the worker sizes its window itself. Two phases on
the same endpoints and events: the receiver answering after 200 ms, then a
receiver answering at once (the 0 ms figure of the same run); the ratio of
the two says how much slow receivers cost. Samples how many requests the
receiver holds open (the window's ramp) and measures the raw aiohttp
ceiling at the endpoints' total concurrency. `--max-in-flight N` fixes the
window instead.
"""

from __future__ import annotations

import statistics
from typing import Any

from ..bench import Bench, EndpointDef, Options, scenario
from ..output import fmt, fmt_int, rate_verdict, verdict
from ..phases import drain_phase, drain_rows, raw_ceiling, raw_rows, report_raw

TARGET_PER_MIN = 400_000  # issue 15, with default settings
TARGET_RATIO = 0.75  # of the 0 ms figure of the same run
TARGET_RSS_MB = 300.0


def _in_flight(m: dict[str, Any], goal: int) -> dict[str, Any]:
    """The receiver's open-request samples of a phase, summarised."""
    series = m.pop("open_series")
    opens = [o for _, o in series]
    reach = {}
    for frac in (0.25, 0.5, 0.9):
        reach[frac] = next((round(t, 2) for t, o in series if o >= frac * goal), None)
    return {
        "peak": m["receiver_max_open"],
        "median_sampled": statistics.median(opens) if opens else None,
        "samples": [[round(t, 2), o] for t, o in series],
        "seconds_to_25pct": reach[0.25],
        "seconds_to_50pct": reach[0.5],
        "seconds_to_90pct": reach[0.9],
    }


def _windows(m: dict[str, Any]) -> str:
    """The worker's window at the end / at its largest (engine_stopped)."""
    e = (m.get("engine") or [None])[0] or {}
    return f"{fmt_int(e.get('window'))} / {fmt_int(e.get('window_max'))}"


@scenario
async def run_slow200(bench: Bench, opts: Options) -> dict[str, Any]:
    n_ep = bench.size("endpoints", 4, 2)
    ep_mif = bench.size("endpoint_max_in_flight", 1000, 50)
    mif = opts.given.get("max_in_flight")  # None: the worker's default window
    events = bench.size("events", 100_000, 1_000)
    latency = float(opts.given.get("latency_ms") or 200.0)
    per = max(1, events // n_ep)
    bench.report.update(
        title=f"{per * n_ep:,} events, {n_ep} endpoints x max_in_flight {ep_mif}, "
        f"run --max-in-flight {mif or 'default'}, receiver latency {latency:g} ms, then 0 ms",
        endpoints=n_ep,
        endpoint_max_in_flight=ep_mif,
        max_in_flight=mif,
        receiver_latency_ms=latency,
    )
    rcv = await bench.receiver("receiver", latency_ms=latency)
    eps = [EndpointDef(f"/s/{i}", rcv, max_in_flight=ep_mif) for i in range(n_ep)]
    m = await drain_phase(bench, rcv, eps, per, max_in_flight=mif, label="run", sample_open=True)
    m.pop("paths")
    m["in_flight"] = _in_flight(m, n_ep * ep_mif)
    fast = await bench.receiver("receiver-0ms")
    eps0 = [EndpointDef(f"/z/{i}", fast, max_in_flight=ep_mif) for i in range(n_ep)]
    z = await drain_phase(bench, fast, eps0, per, max_in_flight=mif, label="run 0 ms")
    z.pop("paths")
    z.pop("open_series")
    bench.report["zero_ms"] = z
    dpm, zdpm = m["deliveries_per_min"], z["deliveries_per_min"]
    to_zero = dpm / zdpm if dpm and zdpm else None
    bench.report["ratio_to_zero_ms"] = None if to_zero is None else round(to_zero, 4)
    raw = await raw_ceiling(
        bench, rcv, secret=eps[0].secret, requests=per * n_ep, concurrency=n_ep * ep_mif
    )
    ratio = report_raw(bench, m, raw)
    little = (dpm / 60) * (latency / 1000) if dpm else None
    reach = m["in_flight"]
    table = drain_rows(m)
    table += [
        ["0 ms receiver: deliveries/min", fmt_int(zdpm)],
        ["0 ms: dispatcher CPU s / 1,000", fmt(z["dispatcher_cpu_s_per_1000"], 3)],
        ["0 ms: dispatcher peak RSS", f"{fmt(z['peak_rss_mb'])} MB"],
        ["ratio to 0 ms", "-" if to_zero is None else f"{to_zero:.2f}"],
        ["window end / max (slow, 0 ms)", f"{_windows(m)}, {_windows(z)}"],
        *raw_rows(raw, ratio),
        ["in flight at receiver: peak", fmt_int(reach["peak"])],
        ["in flight: median of samples", fmt_int(reach["median_sampled"])],
        ["in flight by Little (rate x latency)", fmt_int(little)],
        [
            "seconds to 25 / 50 / 90 % of endpoints' max",
            " / ".join(
                "-" if reach[k] is None else f"{reach[k]:.1f}"
                for k in ("seconds_to_25pct", "seconds_to_50pct", "seconds_to_90pct")
            ),
        ],
    ]
    smoke = opts.smoke
    rss = max(m["peak_rss_mb"], z["peak_rss_mb"])
    verdicts = [
        rate_verdict(TARGET_PER_MIN, dpm, smoke),
        verdict(
            f">= {TARGET_RATIO:g} x the 0 ms figure",
            None if smoke or to_zero is None else to_zero >= TARGET_RATIO,
            "-" if to_zero is None else f"{to_zero:.2f}",
        ),
        verdict(
            f"peak RSS < {TARGET_RSS_MB:g} MB",
            None if smoke else rss < TARGET_RSS_MB,
            f"{rss:.1f} MB",
        ),
    ]
    bench.report["meets_target"] = (
        None
        if smoke
        else dpm >= TARGET_PER_MIN
        and to_zero is not None
        and to_zero >= TARGET_RATIO
        and rss < TARGET_RSS_MB
    )
    return bench.finish(table, verdicts)
