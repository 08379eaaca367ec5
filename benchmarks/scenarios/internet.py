"""internet: 1,000 endpoints whose receivers behave like the internet's.

Each answer waits a lognormal delay (p50 80 ms, p99 1.5 s); 1 % of POSTs
never get an answer (the endpoint's 5 s timeout ends them), 2 % get a 5xx
(500, 502 or 504) and 0.5 % a 429 with `Retry-After: 1`. A third of the
endpoints are https, on a receiver whose certificate a CA made for this run
signed (benchmarks/tlsca.py); the worker trusts that CA through
DISPATCHER_CA_FILE, beside the system store.

1. two receivers (http and https) with that behaviour, seeded;
2. a fresh database, 1,000 endpoints (/i/N, every third one https; default
   limits, a 5 s timeout, retries after 0.5-5 s so that they come due within
   the run), N events spread evenly, enqueued before the worker starts;
3. `dispatcher run` with default settings (its window sized by itself)
   until every event is delivered or dead, then SIGTERM;
4. deliveries/min over the whole run (the retry tail included) and up to
   99 % of the events finished, lag p50/p99 created -> delivered (a
   backlog's: the events were all queued first), HTTP p50/p99, CPU per
   1,000 deliveries of the worker and PostgreSQL, peak RSS, attempts per
   event, the receivers' answers by kind.

Correct: nothing lost (every event delivered or dead), every event reached a
receiver, the worker exits 0. A receiver sees an event more than once by
design here (an attempt that timed out or got a 5xx is sent again).
"""

from __future__ import annotations

import time
from typing import Any

from ..bench import Bench, EndpointDef, Options, run_argv, scenario
from ..database import Progress, db_results, status_totals
from ..meters import Meter, phase_metrics
from ..output import fmt, fmt_int, progress, verdict
from ..phases import standard_rows
from ..processes import dispatcher_argv
from ..tlsca import make_ca

LOGNORMAL_MS = (80.0, 1500.0)  # p50, p99 of the receivers' delays
MIX = "hang=0.01,5xx=0.02,429=0.005"
HTTPS_EVERY = 3  # every third endpoint is https
ENDPOINT = {"retry_base_ms": 500, "retry_cap_ms": 5000}


@scenario
async def run_internet(bench: Bench, opts: Options) -> dict[str, Any]:
    n_ep = bench.size("endpoints", 1000, 30)
    events = bench.size("events", 60_000, 300)
    timeout_ms = 2000 if opts.smoke else 5000
    mif = opts.given.get("max_in_flight")  # None: the worker's own window
    per = max(1, events // n_ep)
    events = per * n_ep
    bench.report.update(
        title=f"{events:,} events, {n_ep:,} endpoints (1 in {HTTPS_EVERY} https), lognormal "
        f"{LOGNORMAL_MS[0]:g}/{LOGNORMAL_MS[1]:g} ms p50/p99, {MIX}, timeout {timeout_ms} ms, "
        f"run --max-in-flight {mif or 'default'}",
        events=events,
        endpoints=n_ep,
        max_in_flight=mif,
        timeout_ms=timeout_ms,
        mix=MIX,
        lognormal_ms=LOGNORMAL_MS,
    )
    tls = make_ca(bench.workdir / "tls")
    bench.env["DISPATCHER_CA_FILE"] = str(tls.ca)
    plain = await bench.receiver("receiver-http", mix=MIX, lognormal_ms=LOGNORMAL_MS, seed=11)
    secure = await bench.receiver(
        "receiver-https", mix=MIX, lognormal_ms=LOGNORMAL_MS, seed=12, tls=tls
    )
    eps = [
        EndpointDef(
            f"/i/{i}",
            secure if i % HTTPS_EVERY == 0 else plain,
            timeout_ms=timeout_ms,
            settings=dict(ENDPOINT),
        )
        for i in range(n_ep)
    ]
    await bench.fresh_db()
    await bench.add_endpoints(eps)
    enq = await bench.enqueue([(e, per) for e in eps])
    rcvs = (plain, secure)
    before = [await r.stats() for r in rcvs]
    meter = Meter(bench.admin_url, bench.opts.db_name, bench.receivers)
    await meter.start()
    series: list[tuple[float, int]] = []
    t0 = time.perf_counter()
    async with Progress(bench.bench_url) as prog:

        async def finished() -> bool:
            n = await prog.finished()
            series.append((time.perf_counter() - t0, n))
            return n >= events

        async def tick() -> None:
            meter.sample()
            t, n = series[-1] if series else (0.0, 0)
            progress(f"run: finished {n:,}/{events:,}  elapsed {t:.0f} s", transient=True)

        argv = run_argv(opts, mif, drain=False)
        progress(f"run: dispatcher {' '.join(argv)} (SIGTERM once every event is finished)")
        runs, stopped_at, started = await bench.children.run_together(
            [dispatcher_argv(*argv)],
            ["run"],
            limit_s=bench.run_limit_s(),
            on_tick=tick,
            stop_when=finished,
            tick_s=0.2,
            on_tick_every_s=1.0,
        )
        seconds = (stopped_at if stopped_at is not None else time.perf_counter()) - started
        outcome = await prog.outcome()
    m_meter = await meter.stop()
    after = [await r.stats() for r in rcvs]
    db = await db_results(bench.bench_url)
    await bench.drop_db()
    posts = sum(a["count"] - b["count"] for a, b in zip(after, before, strict=True))
    unique = sum(a["unique_ids"] - b["unique_ids"] for a, b in zip(after, before, strict=True))
    repeats = sum(a["duplicates"] - b["duplicates"] for a, b in zip(after, before, strict=True))
    m = phase_metrics(
        runs, m_meter, db, enq, expected=events, seconds=seconds, duplicates=repeats, posts=posts
    )
    answers: dict[str, int] = {}
    for a, b in zip(after, before, strict=True):
        for k, v in a.get("answers", {}).items():
            answers[k] = answers.get(k, 0) + v - b.get("answers", {}).get(k, 0)
    t99 = next((t - (started - t0) for t, n in series if n >= 0.99 * events), None)
    m.update(
        dead=outcome["dead"],
        lost=events - outcome["delivered"] - outcome["dead"],
        attempts_per_event=round(outcome["attempts"] / events, 3),
        breaker_openings=outcome["opened"],
        receiver_unique_ids=unique,
        receiver_answers=answers,
        status_counts=status_totals(db["by_endpoint"]),
        seconds_to_99pct=None if t99 is None else round(t99, 2),
        per_min_to_99pct=None if not t99 else round(0.99 * events / t99 * 60, 1),
    )
    bench.report["dispatcher"] = m
    if m["timed_out"]:
        bench.problems.append("run: did not finish in time (killed)")
    if m["exit_codes"] != [0]:
        bench.problems.append(f"run: exited {m['exit_codes']}")
    if m["lost"]:
        bench.problems.append(f"{m['lost']} events neither delivered nor dead")
    if unique != events:
        bench.problems.append(f"the receivers saw {unique} distinct events of {events}")
    progress(
        f"run: {m['delivered']:,} delivered, {m['dead']} dead in {seconds:.1f} s = "
        f"{m['deliveries_per_min']:,.0f}/min; exit {m['exit_codes']}"
    )
    table = [
        ["receiver repeats (retried attempts)", r[1]] if r[0] == "duplicates" else r
        for r in standard_rows(m)
    ]
    table[1:1] = [["  up to 99 % finished", f"{fmt_int(m['per_min_to_99pct'])}/min in "
                   f"{fmt(m['seconds_to_99pct'])} s"]]  # fmt: skip
    table += [
        ["dead letters", fmt_int(m["dead"])],
        ["attempts per event", f"{m['attempts_per_event']:.3f}"],
        ["breaker openings", fmt_int(m["breaker_openings"])],
        ["receiver POSTs (all attempts)", fmt_int(posts)],
        ["receiver answers", ", ".join(f"{k} {v:,}" for k, v in sorted(answers.items()))],
        ["window end / max", _windows(m)],
    ]
    ok = m["lost"] == 0 and unique == events
    verdicts = [verdict("nothing lost, every event reached a receiver", ok, f"{m['dead']} dead")]
    bench.report["meets_target"] = None
    return bench.finish(table, verdicts)


def _windows(m: dict[str, Any]) -> str:
    e = (m.get("engine") or [None])[0] or {}
    return f"{fmt_int(e.get('window'))} / {fmt_int(e.get('window_max'))}"
