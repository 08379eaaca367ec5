"""The measured phases the scenarios are built of, and their report rows.

- drain_phase: fresh database, endpoints, enqueue, then `run --drain` in one
  or more processes, measured (fast, slow200, many, two);
- raw_ceiling: bare aiohttp clients against the same receiver, the yardstick
  for the dispatcher's rate (fast, slow200, two).

noisy and wake measure phases of their own shape on the same pieces.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from .bench import Bench, EndpointDef, run_argv
from .database import db_results, status_totals
from .errors import BenchError
from .meters import Meter, phase_metrics
from .output import fmt, fmt_int, progress, rate_since
from .processes import dispatcher_argv, last_line
from .receiver_control import Receiver


async def drain_phase(
    bench: Bench,
    receiver: Receiver,
    endpoints: Sequence[EndpointDef],
    per_endpoint: int,
    *,
    processes: int = 1,
    max_in_flight: int | None,
    label: str,
    sample_open: bool = False,
    addressed: bool = True,
    keys: int = 0,
    before_enqueue: Callable[[], Awaitable[None]] | None = None,
    run_args: Sequence[str] = (),
    own_rows_only: bool = False,
) -> dict[str, Any]:
    """fresh db → endpoints → [before_enqueue] → enqueue → `run --drain` x
    processes → metrics. `own_rows_only`: the results count the rows of
    `endpoints` alone (before_enqueue wrote others: the history scenario's
    fill)."""
    await bench.fresh_db()
    await bench.add_endpoints(endpoints)
    if before_enqueue is not None:
        await before_enqueue()
    enq = await bench.enqueue(
        [(e, per_endpoint) for e in endpoints], addressed=addressed, keys=keys
    )
    expected = enq["events"]
    before = await receiver.stats()
    meter = Meter(bench.admin_url, bench.opts.db_name, bench.receivers)
    await meter.start()
    # (seconds since start, requests open at the receiver, POSTs it has had)
    open_series: list[tuple[float, int, int]] = []
    t_start = time.perf_counter()
    last = {"count": before["count"], "t": t_start}

    async def tick() -> None:
        meter.sample()
        s = await receiver.stats_or_none()
        if s is None:
            return
        now = time.perf_counter()
        if sample_open:
            open_series.append((now - t_start, int(s["open"]), s["count"] - before["count"]))
        rate = rate_since(last, s["count"], now)
        progress(
            f"{label}: delivered {s['count'] - before['count']:,}/{expected:,}  {rate:,.0f}/s"
            f"  open {s['open']:,}  elapsed {now - t_start:.0f} s",
            transient=True,
        )

    argv = [*run_argv(bench.opts, max_in_flight), *run_args]
    progress(f"{label}: {processes} x dispatcher {' '.join(argv)}")
    tick_s = 0.1 if sample_open else 1.0
    runs, _, t0 = await bench.children.run_together(
        [dispatcher_argv(*argv) for _ in range(processes)],
        [f"run-{i}" for i in range(processes)],
        limit_s=bench.run_limit_s(),
        on_tick=tick,
        tick_s=tick_s,
        on_tick_every_s=tick_s,
    )
    wall = max(r.wall_s for r in runs)
    m_meter = await meter.stop()
    after = await receiver.stats(paths=True)
    db = await db_results(bench.bench_url, [e.id for e in endpoints] if own_rows_only else None)
    # The database has served its purpose: dropping it now keeps its
    # autovacuum off the CPU while a raw ceiling is measured.
    await bench.drop_db()
    posts = after["count"] - before["count"]
    duplicates = after["duplicates"] - before["duplicates"]
    m = phase_metrics(
        runs, m_meter, db, enq, expected=expected, seconds=wall, duplicates=duplicates, posts=posts
    )
    window = None
    if before["count"] == 0 and after["first_ts"] and after["last_ts"] and posts > 1:
        window = after["last_ts"] - after["first_ts"]
    m["receiver_window_per_min"] = round(posts / window * 60, 1) if window else None
    m["receiver_unique_ids"] = after["unique_ids"] - before["unique_ids"]
    m["multi_attempt"] = db["multi_attempt"]
    m["status_counts"] = status_totals(db["by_endpoint"])
    m["paths"] = after.get("paths", {})
    m["receiver_max_open"] = after["max_open"]
    m["open_series"] = open_series
    m["started_wall_ts"] = time.time() - (time.perf_counter() - t0)
    check_phase(m, bench.problems, label, drain=True)
    progress(
        f"{label}: {m['delivered']:,} delivered, {m['deliveries_per_min']:,.0f}/min, "
        f"lost {m['lost']}, duplicates {m['duplicates']}, exit {m['exit_codes']}"
    )
    return m


async def alternating(
    bench: Bench,
    receivers: dict[str, Receiver],
    events: int,
    *,
    rounds: int,
    endpoint_max_in_flight: int,
    label: str = "",
    before: Callable[[str], None] | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """`rounds` rounds of one drain per mode (one receiver each), the modes
    alternating within each round so that drift on a shared machine falls
    on all of them; each mode's phase metrics in order. `before(mode)`
    runs before each drain (to set the workers' environment)."""
    phases: dict[str, list[dict[str, Any]]] = {mode: [] for mode in receivers}
    for rnd in range(rounds):
        for mode, rcv in receivers.items():
            if before is not None:
                before(mode)
            ep = EndpointDef(f"/{mode}", rcv, max_in_flight=endpoint_max_in_flight)
            m = await drain_phase(bench, rcv, [ep], events, max_in_flight=None,
                                  label=f"{label}{mode} {rnd + 1}")  # fmt: skip
            m.pop("open_series")
            m.pop("paths")
            phases[mode].append(m)
    return phases


def check_phase(m: dict[str, Any], problems: list[str], label: str, *, drain: bool) -> None:
    if m["timed_out"]:
        problems.append(f"{label}: dispatcher did not finish in time (killed)")
    for code in m["exit_codes"]:
        if code != 0:
            problems.append(f"{label}: dispatcher run exited {code}")
    if m["lost"]:
        problems.append(f"{label}: {m['lost']} events not delivered")
    if m["duplicates"]:
        problems.append(f"{label}: {m['duplicates']} duplicate POSTs")
    if drain and m["receiver_posts"] != m["delivered"]:
        problems.append(
            f"{label}: receiver got {m['receiver_posts']} POSTs for {m['delivered']} deliveries"
        )
    if drain and m["receiver_unique_ids"] != m["delivered"]:
        problems.append(
            f"{label}: receiver saw {m['receiver_unique_ids']} distinct ids, "
            f"database says {m['delivered']}"
        )


async def raw_ceiling(
    bench: Bench,
    receiver: Receiver,
    *,
    secret: str,
    requests: int,
    concurrency: int,
    clients: int = 1,
    path: str = "/raw",
) -> dict[str, Any]:
    """Median over --raw-passes passes of `clients` bare aiohttp clients run at
    once, each sending --raw-requests requests (default: `requests`, at most
    50,000)."""
    passes = bench.opts.raw_passes
    requests = bench.opts.given.get("raw_requests") or min(requests, 50_000)
    out = []
    for i in range(passes):
        if bench.run_limit_s() < 45 and not bench.opts.smoke:
            progress("raw: skipped, the overall timeout is near")
            break
        await bench.settle()
        progress(
            f"raw: pass {i + 1}/{passes}, {clients} x {requests:,} requests, "
            f"concurrency {concurrency} each"
        )
        argvs = [
            [
                sys.executable, "-m", "benchmarks.rawclient",
                "--url", receiver.url_for(path), "--requests", str(requests),
                "--concurrency", str(concurrency), "--secret", secret,
                "--id-prefix", f"raw{i}_{c}_",
            ]
            for c in range(clients)
        ]  # fmt: skip
        r0 = await receiver.stats()
        results, _, _ = await bench.children.run_together(
            argvs, [f"raw-{i}-{c}" for c in range(clients)], limit_s=bench.run_limit_s()
        )
        r1 = await receiver.stats()
        docs = [json.loads(r.stdout) for r in results if r.returncode == 0]
        if len(docs) != clients:
            raise BenchError(f"raw client failed: {last_line(results[0].stderr)}")
        ok = sum(d["ok"] for d in docs)
        errors = sum(d["errors"] for d in docs)
        secs = max(d["seconds"] for d in docs)
        cpu = sum(r.cpu_s for r in results)
        out.append(
            {
                "per_min": round(ok / secs * 60, 1),
                "ok": ok,
                "errors": errors,
                "seconds": secs,
                "cpu_s_per_1000": round(cpu * 1000 / max(ok, 1), 4),
                "peak_rss_mb": round(max(r.maxrss_mb for r in results), 1),
                "receiver_posts": r1["count"] - r0["count"],
            }
        )
        progress(f"raw: {out[-1]['per_min']:,.0f}/min ({errors} errors)")
    if any(p["errors"] or p["receiver_posts"] != p["ok"] for p in out):
        bench.problems.append("raw client saw errors or a receiver count mismatch")
    return {
        "requests_per_client": requests,
        "clients": clients,
        "concurrency_per_client": concurrency,
        "passes": out,
        "per_min": statistics.median(p["per_min"] for p in out) if out else None,
        "cpu_s_per_1000": statistics.median(p["cpu_s_per_1000"] for p in out) if out else None,
    }


def report_raw(bench: Bench, m: dict[str, Any], raw: dict[str, Any]) -> float | None:
    """Puts the dispatcher phase and the raw ceiling in the report; returns
    the ratio dispatcher/raw (None without a raw figure)."""
    bench.report["dispatcher"] = m
    bench.report["raw"] = raw
    ratio: float | None = m["deliveries_per_min"] / raw["per_min"] if raw["per_min"] else None
    bench.report["ratio_to_raw"] = None if ratio is None else round(ratio, 4)
    # CPU per delivery against the bare client's per request, same run
    # (issue 35): what the engine costs beyond aiohttp's own request path.
    cpu, bare = m.get("dispatcher_cpu_s_per_1000"), raw.get("cpu_s_per_1000")
    raw["dispatcher_cpu_ratio"] = round(cpu / bare, 3) if cpu and bare else None
    bench.report["cpu_ratio_to_raw"] = raw["dispatcher_cpu_ratio"]
    return ratio


def standard_rows(m: dict[str, Any], *, label: str = "") -> list[list[str]]:
    """The rows every phase reports, from phase_metrics."""
    p = f"{label} " if label else ""
    enq = m["enqueue_events_per_s"]
    return [
        [f"{p}deliveries/min", fmt_int(m["deliveries_per_min"])],
        [f"{p}  measured over", f"{m['seconds']:.2f} s"],
        [
            f"{p}enqueue rate",
            "-" if enq is None else f"{fmt_int(enq)} events/s ({m['enqueue_s']:.2f} s)",
        ],
        [
            f"{p}lag p50 / p99 (created->delivered)",
            f"{fmt_int(m['lag_p50_ms'])} / {fmt_int(m['lag_p99_ms'])} ms",
        ],
        [
            f"{p}HTTP p50 / p99 (as measured)",
            f"{fmt(m['http_p50_ms'])} / {fmt(m['http_p99_ms'])} ms",
        ],
        [f"{p}dispatcher CPU s / 1,000", fmt(m["dispatcher_cpu_s_per_1000"], 3)],
        [f"{p}dispatcher CPU s / wall s", fmt(m["dispatcher_cpu_per_wall"], 2)],
        [f"{p}PostgreSQL CPU s / 1,000", fmt(m["postgres_cpu_s_per_1000"], 3)],
        [f"{p}unattributed CPU", f"{fmt(m['unattributed_cpu_s'])} s"],
        [f"{p}DB transactions / 1,000", fmt(m["db_xacts_per_1000"])],
        [f"{p}claims / 1,000", fmt(m.get("claims_per_1000"))],
        [f"{p}WAL bytes / 1,000 (whole server)", fmt(m["wal_bytes_per_1000"], 0)],
        [f"{p}dispatcher peak RSS", f"{fmt(m['peak_rss_mb'])} MB"],
        [f"{p}delivered", f"{m['delivered']:,} of {m['expected']:,}"],
        [f"{p}lost", f"{m['lost']:,}"],
        [f"{p}duplicates", f"{m['duplicates']:,}"],
    ]


def drain_rows(m: dict[str, Any]) -> list[list[str]]:
    """standard_rows of a drain phase, with the receiver-window rate."""
    table = standard_rows(m)
    table[1:1] = [["  receiver-window rate/min", fmt_int(m["receiver_window_per_min"])]]
    return table


def raw_rows(raw: dict[str, Any], ratio: float | None, *, what: str = "") -> list[list[str]]:
    """The raw ceiling beside the dispatcher's rate: rate, ratio, CPU."""
    c = raw["clients"]
    mif = raw["concurrency_per_client"]
    clients = "aiohttp" if c == 1 else f"{c} aiohttp clients"
    per = f"{c} x " if c > 1 else ""
    each = " each" if c > 1 else ""
    return [
        [
            f"raw ceiling/min ({clients})",
            f"{fmt_int(raw['per_min'])} (median of {len(raw['passes'])} x {per}"
            f"{raw['requests_per_client']:,}, concurrency {mif}{each})",
        ],
        [f"ratio dispatcher{what}/raw", "-" if ratio is None else f"{ratio:.2f}"],
        ["raw client CPU s / 1,000", fmt(raw["cpu_s_per_1000"], 3)],
        [
            f"dispatcher{what} CPU / raw client CPU, per delivery",
            fmt(raw.get("dispatcher_cpu_ratio"), 2),
        ],
    ]
