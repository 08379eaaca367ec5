"""noisy: 20 healthy endpoints next to a hanging one, a rate-limited one and
one answering 500, each of those with a large backlog.

`dispatcher run` (not --drain) is stopped with SIGTERM once every healthy
event arrived. The healthy endpoints' rate is compared with a solo run of
the same 20 endpoints in the same invocation.
"""

from __future__ import annotations

import time
from typing import Any

from ..bench import Bench, EndpointDef, Options, run_argv, scenario
from ..database import db_results, status_totals
from ..errors import BenchError
from ..meters import Meter, phase_metrics
from ..output import fmt, fmt_int, progress, verdict
from ..phases import check_phase, standard_rows
from ..processes import dispatcher_argv
from ..receiver_control import Receiver

TARGET_RATIO = 0.90
HANG_TIMEOUT_MS = 5000


async def _noisy_phase(
    bench: Bench,
    main: Receiver,
    healthy: list[EndpointDef],
    bad: list[EndpointDef],
    per: int,
    bad_per: int,
    mif: int,
    label: str,
) -> dict[str, Any]:
    """`dispatcher run` (no --drain) until every healthy event arrived, then SIGTERM."""
    await bench.fresh_db()
    await bench.add_endpoints([*healthy, *bad])
    jobs = [(e, per) for e in healthy] + [(e, bad_per) for e in bad]
    enq = await bench.enqueue(jobs)
    expected = per * len(healthy)
    healthy_paths = {e.path for e in healthy}
    bad_rcvs = {id(e.receiver): e.receiver for e in bad}
    before = await main.stats(paths=True)
    before_bad = {k: await r.stats(paths=True) for k, r in bad_rcvs.items()}
    for p in healthy_paths:
        if p in before["paths"]:
            raise BenchError(f"path {p} already used on the receiver")
    meter = Meter(bench.admin_url, bench.opts.db_name, bench.receivers)
    await meter.start()
    seen = {"n": 0}

    async def done() -> bool:
        s = await main.stats_or_none(paths=True)
        if s is not None:
            seen["n"] = sum(v["count"] for k, v in s["paths"].items() if k in healthy_paths)
        return seen["n"] >= expected

    t_wall0 = time.time()
    t_perf0 = time.perf_counter()

    async def tick() -> None:
        meter.sample()
        progress(
            f"{label}: healthy {seen['n']:,}/{expected:,}  "
            f"elapsed {time.perf_counter() - t_perf0:.0f} s",
            transient=True,
        )

    argv = run_argv(bench.opts, mif, drain=False)
    progress(f"{label}: dispatcher {' '.join(argv)} (SIGTERM once healthy events are in)")
    runs, stopped_at, t0 = await bench.children.run_together(
        [dispatcher_argv(*argv)],
        ["run"],
        limit_s=bench.run_limit_s(),
        on_tick=tick,
        stop_when=done,
        tick_s=0.2,
    )
    run = runs[0]
    m_meter = await meter.stop()
    after = await main.stats(paths=True)
    after_bad = {k: await r.stats(paths=True) for k, r in bad_rcvs.items()}
    db = await db_results(bench.bench_url, [e.id for e in healthy])
    await bench.drop_db()
    hp = {k: v for k, v in after["paths"].items() if k in healthy_paths}
    last_ts = max((v["last_ts"] for v in hp.values()), default=None)
    seconds = (last_ts - t_wall0) if last_ts else float("nan")
    m = phase_metrics(
        runs,
        m_meter,
        db,
        enq,
        expected=expected,
        seconds=seconds,
        duplicates=sum(v["duplicates"] for v in hp.values()),
        posts=sum(v["count"] for v in hp.values()),
    )
    # CPU per 1,000 is over everything the process did (bad endpoints included).
    m["run_wall_s"] = round(run.wall_s, 3)
    m["sigterm_to_exit_s"] = None if stopped_at is None else round(t0 + run.wall_s - stopped_at, 3)
    m["multi_attempt"] = db["multi_attempt"]
    bad_out = []
    none = {"count": 0, "duplicates": 0}
    for e in bad:
        b0 = before_bad[id(e.receiver)]["paths"].get(e.path, none)
        b1 = after_bad[id(e.receiver)]["paths"].get(e.path, none)
        counts = db["by_endpoint"].get(e.id, {})
        rows = sum(counts.values())
        bad_out.append(
            {
                "path": e.path,
                "endpoint_id": e.id,
                "receiver_posts": b1["count"] - b0["count"],
                "status_counts": counts,
                "rows": rows,
            }
        )
        if rows != bad_per:
            bench.problems.append(f"{label}: {e.path} has {rows} rows, {bad_per} were queued")
    m["bad"] = bad_out
    m["status_counts"] = status_totals(db["by_endpoint"])
    check_phase(m, bench.problems, label, drain=False)
    if m["multi_attempt"]:
        bench.problems.append(f"{label}: {m['multi_attempt']} healthy rows took >1 attempt")
    progress(
        f"{label}: healthy {m['delivered']:,} in {seconds:.2f} s = "
        f"{m['deliveries_per_min']:,.0f}/min; exit {run.returncode}, "
        f"{m['sigterm_to_exit_s']} s after SIGTERM"
    )
    return m


@scenario
async def run_noisy(bench: Bench, opts: Options) -> dict[str, Any]:
    n_ep = bench.size("endpoints", 20, 4)
    events = bench.size("events", 40_000, 800)
    per = max(1, events // n_ep)
    bad_per = per * 10
    mif = bench.size("max_in_flight", 256, 64)
    bench.report.update(
        title=f"{n_ep} healthy x {per:,} events; hanging, rate-limited (10/s) and "
        f"500 endpoints x {bad_per:,} queued; run --max-in-flight {mif}",
        healthy_endpoints=n_ep,
        per_endpoint=per,
        bad_per_endpoint=bad_per,
        max_in_flight=mif,
    )
    main = await bench.receiver("receiver")
    hang = await bench.receiver("receiver-hang", hang=True)
    err = await bench.receiver("receiver-500", status=500)
    phases: dict[str, Any] = {}
    for label in ("solo", "noisy"):
        healthy = [EndpointDef(f"/{label}/h/{i}", main) for i in range(n_ep)]
        bad = []
        if label == "noisy":
            bad = [
                EndpointDef("/hang", hang, timeout_ms=HANG_TIMEOUT_MS),
                EndpointDef("/rate", main, rate_per_s=10.0),
                EndpointDef("/err", err),
            ]
        phases[label] = await _noisy_phase(
            bench, main, healthy, bad, per, bad_per if bad else 0, mif, label
        )
    solo, noisy = phases["solo"], phases["noisy"]
    s_dpm, n_dpm = solo["deliveries_per_min"], noisy["deliveries_per_min"]
    ratio = n_dpm / s_dpm if s_dpm else None
    bench.report["solo"] = solo
    bench.report["noisy"] = noisy
    bench.report["ratio_noisy_to_solo"] = None if ratio is None else round(ratio, 4)
    table = standard_rows(solo, label="solo") + standard_rows(noisy, label="noisy")
    table += [
        [
            "solo / noisy: run exit, s from SIGTERM",
            f"{solo['exit_codes'][0]}, {fmt(solo['sigterm_to_exit_s'], 2)} s / "
            f"{noisy['exit_codes'][0]}, {fmt(noisy['sigterm_to_exit_s'], 2)} s",
        ]
    ]
    for b in noisy["bad"]:
        counts = ", ".join(f"{k} {v:,}" for k, v in sorted(b["status_counts"].items()))
        table.append([f"bad {b['path']}", f"{b['receiver_posts']:,} POSTs; rows: {counts}"])
    table.append(["healthy rate noisy / solo", "-" if ratio is None else f"{ratio:.3f}"])
    ok = None if opts.smoke or ratio is None else ratio >= TARGET_RATIO
    detail = f"{fmt_int(n_dpm)} vs {fmt_int(s_dpm)}/min"
    bench.report["meets_target"] = ok
    return bench.finish(table, [verdict(f"noisy/solo >= {TARGET_RATIO:.2f}", ok, detail)])
