"""The scenarios beyond `fast`: slow200, many, noisy, two, wake.

Each one builds on the plumbing of harness.py (children with exact rusage,
receivers, a fresh database, PostgreSQL CPU sampling, pg_stat_database
deltas) and returns a report whose `table` is what `render` prints:

- slow200: receivers answering after 200 ms, thousands in flight
  (4 endpoints x max_in_flight 1000, `run --drain --max-in-flight 4000`);
  also samples how many requests the receiver holds open (adaptive
  concurrency ramp) and measures the raw aiohttp ceiling at the same
  concurrency.
- many: 1,000 endpoints on one fast receiver (paths /e/N), a few hundred
  events each, `run --drain`; per-endpoint completion spread.
- noisy: 20 healthy endpoints next to a hanging one, a rate-limited one and
  one answering 500, each of those with a large backlog; `dispatcher run`
  (not --drain) is stopped with SIGTERM once every healthy event arrived.
  The healthy endpoints' rate is compared with a solo run of the same 20
  endpoints in the same invocation.
- two: two `run --drain` processes on one database, one endpoint; no event
  may be sent twice. Raw ceiling: two bare clients at once.
- wake: `dispatcher run` idle; one `SELECT dispatcher_enqueue(...)` at a
  time, committed by the harness; latency = first byte at the receiver
  (time.time() there) minus the moment COMMIT returned (time.time() here).

Every wait is bounded by --timeout-s; everything runs on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import random
import shutil
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg

from dispatcher.embedded import with_database

from .harness import (
    DB_COUNTERS,
    RESULT_COLUMNS,
    TARGET_PER_MIN,
    BenchError,
    Children,
    ChildResult,
    Options,
    PgCpu,
    Receiver,
    _cpu_busy,
    _dispatcher,
    _engine_stats,
    _fmt,
    _fmt_int,
    _last_line,
    _redact,
    create_database,
    db_counters,
    drop_database,
    http_percentiles,
    machine_info,
    postback_payload,
    progress,
    rate_since,
    run_argv,
    settle,
)
from .harness import HTTP_SQL as HARNESS_HTTP_SQL

SLOW_TARGET_RSS_MB = 300.0
NOISY_TARGET_RATIO = 0.90
TWO_TARGET_PER_MIN = 500_000
WAKE_TARGET_P99_MS = 50.0


# ------------------------------------------------------------ plumbing


@dataclass
class EndpointDef:
    path: str
    receiver: Receiver
    max_in_flight: int | None = None
    rate_per_s: float | None = None
    timeout_ms: int | None = None
    id: int = 0
    secret: str = ""

    @property
    def url(self) -> str:
        return self.receiver.url_for(self.path)


@dataclass
class Bench:
    """One scenario run: temp dir, child processes, receivers, the database."""

    opts: Options
    admin_url: str
    started: float = field(default_factory=time.monotonic)
    receivers: list[Receiver] = field(default_factory=list)
    db_created: bool = False

    def __post_init__(self) -> None:
        self.workdir = Path(tempfile.mkdtemp(prefix=f"dispatcher-bench-{self.opts.scenario}-"))
        self.bench_url = with_database(self.admin_url, self.opts.db_name)
        env = dict(os.environ)
        env.update(DATABASE_URL=self.bench_url, DISPATCHER_ALLOW_PRIVATE_TARGETS="1")
        env.update(self.opts.extra_env)
        self.env = env
        self.children = Children(self.started + self.opts.timeout_s, self.workdir, env)
        self.report: dict[str, Any] = {
            "scenario": self.opts.scenario,
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "database": _redact(self.bench_url),
            "machine": machine_info(),
            "smoke": self.opts.smoke,
        }
        self.problems: list[str] = []

    def size(self, name: str, default: int, smoke: int) -> int:
        v = self.opts.given.get(name)
        if v is not None:
            return int(v)
        return smoke if self.opts.smoke else default

    async def receiver(self, name: str, **kw: Any) -> Receiver:
        r = Receiver(self.children, name=name, **kw)
        progress(f"receiver {name}: starting {kw or ''}")
        await r.start()
        self.receivers.append(r)
        return r

    async def fresh_db(self) -> None:
        progress(f"database: creating {self.opts.db_name}")
        self.report["postgres_version"] = await create_database(self.admin_url, self.opts.db_name)
        self.db_created = True
        await self.children.run(_dispatcher("migrate", "--json"), name="migrate", timeout_s=60)

    async def drop_db(self) -> None:
        if self.db_created:
            await drop_database(self.admin_url, self.opts.db_name)
            self.db_created = False

    async def add_endpoints(self, defs: Sequence[EndpointDef]) -> None:
        """Creates the endpoints in-process (1,000 `endpoint add` processes
        would take minutes), with the same store call as the CLI's."""
        from dispatcher import service, store
        from dispatcher.models import EndpointSpec
        from dispatcher.settings import Settings

        box = Settings.from_env(self.env).secret_box()
        conn = await asyncpg.connect(self.bench_url, timeout=10)
        try:
            async with conn.transaction():
                for d in defs:
                    kw: dict[str, Any] = {}
                    if d.max_in_flight is not None:
                        kw["max_in_flight"] = d.max_in_flight
                    if d.rate_per_s is not None:
                        kw["rate_per_s"] = d.rate_per_s
                    if d.timeout_ms is not None:
                        kw["timeout_ms"] = d.timeout_ms
                    spec = EndpointSpec(url=d.url, **kw)
                    spec.validate()
                    secret = service.new_secret(None)
                    row = await store.add_endpoint(conn, spec, secret, box)
                    d.id, d.secret = int(row["id"]), secret
        finally:
            await conn.close()

    async def enqueue(
        self, jobs: Sequence[tuple[EndpointDef, int]], *, seed: int = 7
    ) -> dict[str, Any]:
        """Writes `count` events per endpoint (interleaved) as JSONL, each
        addressed to its endpoint, and times `dispatcher enqueue --file`."""
        path = self.workdir / f"events-{len(jobs)}.jsonl"
        rng = random.Random(seed)
        total = 0
        with path.open("w", encoding="utf-8") as f:
            left = [n for _, n in jobs]
            i = 0
            while any(left):
                for k, (ep, _) in enumerate(jobs):
                    if left[k]:
                        left[k] -= 1
                        line = {
                            "event_type": "bench." + self.opts.scenario,
                            "payload": postback_payload(rng, i),
                            "endpoint": ep.id,
                        }
                        f.write(json.dumps(line, separators=(",", ":")) + "\n")
                        i += 1
            total = i
        settled = await settle()
        progress(f"enqueue: {total:,} events ({path.stat().st_size / 1e6:.1f} MB JSONL)")
        res = await self.children.run(
            _dispatcher("enqueue", "--file", str(path), "--json"), name="enqueue"
        )
        doc = json.loads(res.stdout)
        if doc.get("deliveries") != total:
            raise BenchError(f"enqueue created {doc.get('deliveries')} deliveries, not {total}")
        path.unlink()
        progress(f"enqueue: {total / res.wall_s:,.0f} events/s ({res.wall_s:.2f} s)")
        return {
            "events": total,
            "seconds": round(res.wall_s, 3),
            "events_per_s": round(total / res.wall_s, 1),
            "cpu_s": round(res.cpu_s, 3),
            "settle_s": settled,
        }

    async def close(self) -> None:
        progress("cleanup")
        for r in self.receivers:
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(r.close(), 15)
        with contextlib.suppress(BaseException):
            await self.children.stop_all()
        if self.db_created:
            try:
                await asyncio.wait_for(self.drop_db(), 30)
            except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
                progress(f"warning: could not drop {self.opts.db_name}: {exc}")
        shutil.rmtree(self.workdir, ignore_errors=True)


class Meter:
    """CPU, database and receiver counters across one measured phase."""

    def __init__(self, bench: Bench) -> None:
        self.bench = bench
        self.pg = PgCpu(bench.opts.db_name)

    async def start(self) -> None:
        b = self.bench
        self.counters0 = await db_counters(b.admin_url, b.opts.db_name)
        self.busy0 = _cpu_busy()
        self.rcv0 = [r.cpu_s() for r in b.receivers]
        self.pg.sample()

    def sample(self) -> None:
        self.pg.sample()

    async def stop(self) -> dict[str, Any]:
        b = self.bench
        busy1 = _cpu_busy()
        self.pg.sample()
        rcv1 = [r.cpu_s() for r in b.receivers]
        counters1 = await db_counters(b.admin_url, b.opts.db_name)
        rcv: float | None = 0.0
        for x, y in zip(self.rcv0, rcv1, strict=True):
            rcv = None if rcv is None or x is None or y is None else rcv + y - x
        pg = self.pg.totals()
        busy = None if self.busy0 is None or busy1 is None else busy1 - self.busy0
        delta = (
            {k: counters1[k] - self.counters0[k] for k in DB_COUNTERS}
            if self.counters0 and counters1
            else None
        )
        return {
            "machine_busy_cpu_s": busy,
            "receiver_cpu_s": rcv,
            "postgres_cpu_s": pg[0] if pg else None,
            "postgres_bench_db_cpu_s": pg[1] if pg else None,
            "db_counters": delta,
        }


async def run_procs(
    bench: Bench,
    argvs: Sequence[list[str]],
    names: Sequence[str],
    *,
    on_tick: Callable[[], Awaitable[None]] | None = None,
    stop_when: Callable[[], Awaitable[bool]] | None = None,
    tick_s: float = 1.0,
    on_tick_every_s: float = 1.0,
    stop_grace_s: float = 60.0,
) -> tuple[list[ChildResult], float | None, float]:
    """Runs dispatcher processes side by side (exact rusage from wait4 for
    each). With stop_when, all get SIGTERM once it answers true. Returns the
    results, the perf_counter time of the SIGTERM (or None) and of the start.
    A process still running at the deadline is killed (timed_out)."""
    children = bench.children
    reserve = min(60.0, bench.opts.timeout_s * 0.1)
    limit = max(children.remaining() - reserve, 1.0)
    loop = asyncio.get_running_loop()
    t0 = time.perf_counter()
    procs = []
    waiters = []
    exit_at: dict[int, float] = {}
    for k, (argv, name) in enumerate(zip(argvs, names, strict=True)):
        proc, out_path, err_path = children.spawn(argv, name=name)
        procs.append((proc, out_path, err_path, time.perf_counter()))
        w = loop.run_in_executor(None, os.wait4, proc.pid, 0)
        # When the loop learnt of the exit: the wall time of that process.
        w.add_done_callback(functools.partial(_note_exit, exit_at, k))
        waiters.append(w)
    stopped_at: float | None = None
    timed_out = False
    last_tick = 0.0
    end = time.monotonic() + limit
    try:
        while not all(w.done() for w in waiters):
            await asyncio.wait(waiters, timeout=tick_s, return_when=asyncio.ALL_COMPLETED)
            now = time.monotonic()
            if on_tick is not None and now - last_tick >= on_tick_every_s:
                last_tick = now
                await on_tick()
            if stop_when is not None and stopped_at is None and await stop_when():
                stopped_at = time.perf_counter()
                for proc, *_ in procs:
                    with contextlib.suppress(ProcessLookupError):
                        if proc.poll() is None:
                            proc.send_signal(signal.SIGTERM)
                end = min(end, now + stop_grace_s)
            if now > end:
                timed_out = True
                for proc, *_ in procs:
                    children.kill(proc)
                await asyncio.wait(waiters, timeout=10)
                break
    except BaseException:
        for proc, *_ in procs:
            children.kill(proc)
        with contextlib.suppress(BaseException):
            await asyncio.wait(waiters, timeout=10)
        raise
    finally:
        for proc, *_ in procs:
            children.live.pop(proc.pid, None)
    results = []
    for k, ((proc, out_path, err_path, started), w) in enumerate(zip(procs, waiters, strict=True)):
        if not w.done():
            raise BenchError(f"{proc.pid} could not be reaped")
        _pid, status, usage = w.result()
        results.append(
            ChildResult(
                returncode=os.waitstatus_to_exitcode(status),
                wall_s=exit_at.get(k, time.perf_counter()) - started,
                cpu_s=usage.ru_utime + usage.ru_stime,
                maxrss_mb=usage.ru_maxrss / 1024,
                stdout=out_path.read_text(errors="replace"),
                stderr=err_path.read_text(errors="replace"),
                timed_out=timed_out,
            )
        )
    return results, stopped_at, t0


def _note_exit(exit_at: dict[int, float], k: int, _f: object) -> None:
    exit_at.setdefault(k, time.perf_counter())


RESULT_SQL = f"""
SELECT {RESULT_COLUMNS},
       extract(epoch FROM max(delivered_at)) AS last_delivered_ts,
       count(*) FILTER (WHERE status = 'delivered' AND attempt_count <> 1) AS multi_attempt
FROM webhook_queue
WHERE $1::bigint[] IS NULL OR endpoint_id = ANY($1::bigint[])
"""

HTTP_SQL = HARNESS_HTTP_SQL + "WHERE $1::bigint[] IS NULL OR endpoint_id = ANY($1::bigint[])\n"


async def db_results(bench: Bench, endpoint_ids: list[int] | None = None) -> dict[str, Any]:
    conn = await asyncpg.connect(bench.bench_url, timeout=10)
    try:
        row = await conn.fetchrow(RESULT_SQL, endpoint_ids)
        http = await conn.fetchrow(HTTP_SQL, endpoint_ids)
        per = await conn.fetch(
            "SELECT endpoint_id, status, count(*) AS n FROM webhook_queue"
            " GROUP BY 1, 2 ORDER BY 1, 2"
        )
    finally:
        await conn.close()
    assert row is not None and http is not None
    out: dict[str, Any] = {k: (float(v) if isinstance(v, float) else v) for k, v in row.items()}
    for k in ("lag_p50_ms", "lag_p99_ms", "lag_max_ms", "last_delivered_ts"):
        out[k] = None if row[k] is None else float(row[k])
    out.update(http_percentiles(http))
    by_ep: dict[int, dict[str, int]] = {}
    for r in per:
        by_ep.setdefault(int(r["endpoint_id"]), {})[r["status"]] = int(r["n"])
    out["by_endpoint"] = by_ep
    return out


def phase_metrics(
    runs: Sequence[ChildResult],
    meter: dict[str, Any],
    db: dict[str, Any],
    enqueue: dict[str, Any] | None,
    *,
    expected: int,
    seconds: float,
    duplicates: int,
    posts: int,
) -> dict[str, Any]:
    """The figures every scenario reports, from one measured phase (the
    processes, the Meter, db_results and Bench.enqueue)."""
    delivered = int(db["delivered"])
    per_k = 1000 / delivered if delivered else None
    cpu = sum(r.cpu_s for r in runs)
    busy = meter["machine_busy_cpu_s"]
    rcv = meter["receiver_cpu_s"]
    pg = meter["postgres_cpu_s"]
    foreign = None
    if busy is not None and rcv is not None and pg is not None:
        foreign = max(busy - cpu - rcv - pg, 0.0)
    counters = meter["db_counters"]

    def r4(v: float | None, k: float | None = 1.0) -> float | None:
        return None if v is None or k is None else round(v * k, 4)

    return {
        "delivered": delivered,
        "expected": expected,
        "lost": expected - delivered,
        "duplicates": duplicates,
        "receiver_posts": posts,
        "seconds": round(seconds, 3),
        "deliveries_per_min": round(delivered / seconds * 60, 1) if seconds > 0 else None,
        "enqueue_events_per_s": enqueue["events_per_s"] if enqueue else None,
        "enqueue_s": enqueue["seconds"] if enqueue else None,
        "lag_p50_ms": db["lag_p50_ms"],
        "lag_p99_ms": db["lag_p99_ms"],
        "lag_max_ms": db["lag_max_ms"],
        "http_p50_ms": db["http_p50_ms"],
        "http_p99_ms": db["http_p99_ms"],
        "dispatcher_cpu_s": round(cpu, 3),
        "dispatcher_cpu_s_per_1000": r4(cpu, per_k),
        "dispatcher_cpu_per_wall": round(cpu / seconds, 3) if seconds > 0 else None,
        "postgres_cpu_s": r4(pg),
        "postgres_cpu_s_per_1000": r4(pg, per_k),
        "receiver_cpu_s": r4(rcv),
        "machine_busy_cpu_s": r4(busy),
        "unattributed_cpu_s": r4(foreign),
        "db_counters": counters,
        "db_xacts_per_1000": (
            round(counters["xact_commit"] * per_k, 1) if counters and per_k else None
        ),
        "peak_rss_mb": round(max((r.maxrss_mb for r in runs), default=0.0), 1),
        "exit_codes": [r.returncode for r in runs],
        "timed_out": any(r.timed_out for r in runs),
        "engine": [_engine_stats(r.stderr) for r in runs],
        "stderr_tail": [_last_line(r.stderr) for r in runs if r.returncode],
    }


def standard_rows(m: dict[str, Any], *, label: str = "") -> list[list[str]]:
    p = f"{label} " if label else ""
    return [
        [f"{p}deliveries/min", _fmt_int(m["deliveries_per_min"])],
        [f"{p}  measured over", f"{m['seconds']:.2f} s"],
        [
            f"{p}enqueue rate",
            "-"
            if m["enqueue_events_per_s"] is None
            else f"{_fmt_int(m['enqueue_events_per_s'])} events/s ({m['enqueue_s']:.2f} s)",
        ],
        [
            f"{p}lag p50 / p99 (created->delivered)",
            f"{_fmt_int(m['lag_p50_ms'])} / {_fmt_int(m['lag_p99_ms'])} ms",
        ],
        [
            f"{p}HTTP p50 / p99 (as measured)",
            f"{_fmt(m['http_p50_ms'])} / {_fmt(m['http_p99_ms'])} ms",
        ],
        [f"{p}dispatcher CPU s / 1,000", _fmt(m["dispatcher_cpu_s_per_1000"], 3)],
        [f"{p}dispatcher CPU s / wall s", _fmt(m["dispatcher_cpu_per_wall"], 2)],
        [f"{p}PostgreSQL CPU s / 1,000", _fmt(m["postgres_cpu_s_per_1000"], 3)],
        [f"{p}unattributed CPU", f"{_fmt(m['unattributed_cpu_s'])} s"],
        [f"{p}DB transactions / 1,000", _fmt(m["db_xacts_per_1000"])],
        [f"{p}dispatcher peak RSS", f"{_fmt(m['peak_rss_mb'])} MB"],
        [f"{p}delivered", f"{m['delivered']:,} of {m['expected']:,}"],
        [f"{p}lost", f"{m['lost']:,}"],
        [f"{p}duplicates", f"{m['duplicates']:,}"],
    ]


def drain_rows(m: dict[str, Any]) -> list[list[str]]:
    """standard_rows of a drain phase, with the receiver-window rate."""
    table = standard_rows(m)
    table[1:1] = [["  receiver-window rate/min", _fmt_int(m["receiver_window_per_min"])]]
    return table


def _report_raw(bench: Bench, m: dict[str, Any], raw: dict[str, Any]) -> float | None:
    """Puts the dispatcher phase and the raw ceiling in the report; returns
    the ratio dispatcher/raw (None without a raw figure)."""
    bench.report["dispatcher"] = m
    bench.report["raw"] = raw
    dpm = m["deliveries_per_min"]
    ratio: float | None = dpm / raw["per_min"] if raw["per_min"] else None
    bench.report["ratio_to_raw"] = None if ratio is None else round(ratio, 4)
    return ratio


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
        if bench.children.remaining() < 45 and not bench.opts.smoke:
            progress("raw: skipped, the overall timeout is near")
            break
        await settle()
        progress(
            f"raw: pass {i + 1}/{passes}, {clients} x {requests:,} requests, "
            f"concurrency {concurrency} each"
        )
        argvs = [
            [
                sys.executable, "-m", "benchmarks.harness", "raw",
                "--url", receiver.url_for(path), "--requests", str(requests),
                "--concurrency", str(concurrency), "--secret", secret,
                "--id-prefix", f"raw{i}_{c}_",
            ]
            for c in range(clients)
        ]  # fmt: skip
        results, _, _ = await run_procs(bench, argvs, [f"raw-{i}-{c}" for c in range(clients)])
        docs = [json.loads(r.stdout) for r in results if r.returncode == 0]
        if len(docs) != clients:
            raise BenchError(f"raw client failed: {_last_line(results[0].stderr)}")
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
            }
        )
        progress(f"raw: {out[-1]['per_min']:,.0f}/min ({errors} errors)")
    med = statistics.median(p["per_min"] for p in out) if out else None
    if any(p["errors"] for p in out):
        bench.problems.append("raw client saw errors")
    return {
        "requests_per_client": requests,
        "clients": clients,
        "concurrency_per_client": concurrency,
        "passes": out,
        "per_min": med,
        "cpu_s_per_1000": statistics.median(p["cpu_s_per_1000"] for p in out) if out else None,
    }


def finish(bench: Bench, table: list[list[str]], verdicts: list[str]) -> dict[str, Any]:
    r = bench.report
    r["table"] = table
    r["verdicts"] = verdicts
    r["problems"] = bench.problems
    r["ok"] = not bench.problems
    r["total_s"] = round(time.monotonic() - bench.started, 1)
    return r


def render(report: dict[str, Any]) -> str:
    rows = report["table"]
    width = max(len(k) for k, _ in rows)
    head = f"dispatcher bench: scenario {report['scenario']}, {report.get('title', '')}".rstrip(
        ", "
    )
    lines = [head, "-" * len(head)]
    lines += [f"{k.ljust(width)}  {v}" for k, v in rows]
    lines.append("")
    lines += report["verdicts"]
    if report["problems"]:
        lines.append("PROBLEMS: " + "; ".join(report["problems"]))
    else:
        lines.append("correctness: ok (nothing lost, no duplicates)")
    return "\n".join(lines)


def _verdict(name: str, ok: bool | None, detail: str) -> str:
    if ok is None:
        return f"target {name}: not judged (smoke run) - {detail}"
    return f"target {name}: {'meets' if ok else 'BELOW'} - {detail}"


def _rate_verdict(target: int, dpm: float, smoke: bool, what: str = "") -> str:
    """The deliveries/min target, not judged in a smoke run."""
    return _verdict(
        f"{target:,}/min{what}",
        None if smoke else dpm >= target,
        f"{_fmt_int(dpm)}/min = {dpm / target:.2f}x",
    )


def _pct(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    k = min(len(s) - 1, max(0, round(q * (len(s) - 1))))
    return s[k]


async def _stats_or_none(r: Receiver, *, paths: bool = False) -> dict[str, Any] | None:
    try:
        return await r.stats(paths=paths)
    except (aiohttp.ClientError, TimeoutError, OSError):
        return None


# ------------------------------------------------------------ drain phases


async def drain_phase(
    bench: Bench,
    receiver: Receiver,
    endpoints: Sequence[EndpointDef],
    per_endpoint: int,
    *,
    processes: int = 1,
    max_in_flight: int,
    label: str,
    sample_open: bool = False,
) -> dict[str, Any]:
    """fresh db → endpoints → enqueue → `run --drain` x processes → metrics."""
    await bench.fresh_db()
    await bench.add_endpoints(endpoints)
    enq = await bench.enqueue([(e, per_endpoint) for e in endpoints])
    expected = enq["events"]
    before = await receiver.stats()
    meter = Meter(bench)
    await meter.start()
    open_series: list[tuple[float, int]] = []
    t_start = time.perf_counter()
    last = {"count": before["count"], "t": t_start}

    async def tick() -> None:
        meter.sample()
        s = await _stats_or_none(receiver)
        if s is None:
            return
        now = time.perf_counter()
        if sample_open:
            open_series.append((now - t_start, int(s["open"])))
        rate = rate_since(last, s["count"], now)
        progress(
            f"{label}: delivered {s['count'] - before['count']:,}/{expected:,}  {rate:,.0f}/s"
            f"  open {s['open']:,}  elapsed {now - t_start:.0f} s",
            transient=True,
        )

    argv = run_argv(bench.opts, max_in_flight)
    progress(f"{label}: {processes} x dispatcher {' '.join(argv)}")
    runs, _, t0 = await run_procs(
        bench,
        [_dispatcher(*argv) for _ in range(processes)],
        [f"run-{i}" for i in range(processes)],
        on_tick=tick,
        tick_s=0.25 if sample_open else 1.0,
        on_tick_every_s=0.25 if sample_open else 1.0,
    )
    wall = max(r.wall_s for r in runs)
    m_meter = await meter.stop()
    after = await receiver.stats(paths=True)
    db = await db_results(bench)
    await bench.drop_db()
    posts = after["count"] - before["count"]
    duplicates = after["duplicates"] - before["duplicates"]
    m = phase_metrics(
        runs, m_meter, db, enq, expected=expected, seconds=wall, duplicates=duplicates, posts=posts
    )
    window = None
    if after["first_ts"] and after["last_ts"] and before["last_ts"] != after["last_ts"]:
        first = after["first_ts"] if before["count"] == 0 else None
        if first is not None:
            window = after["last_ts"] - first
    m["receiver_window_per_min"] = round(posts / window * 60, 1) if window else None
    m["multi_attempt"] = db["multi_attempt"]
    m["status_counts"] = _status_totals(db["by_endpoint"])
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


def _status_totals(by_ep: dict[int, dict[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for counts in by_ep.values():
        for k, v in counts.items():
            out[k] = out.get(k, 0) + v
    return out


def _scenario(
    body: Callable[[Bench, Options], Awaitable[dict[str, Any]]],
) -> Callable[[Options, str], Awaitable[dict[str, Any]]]:
    """Makes a runner of a scenario body: one Bench, closed however it ends."""

    @functools.wraps(body)
    async def run(opts: Options, admin_url: str) -> dict[str, Any]:
        bench = Bench(opts, admin_url)
        try:
            return await body(bench, opts)
        finally:
            await bench.close()

    return run


# ------------------------------------------------------------ slow200


@_scenario
async def run_slow200(bench: Bench, opts: Options) -> dict[str, Any]:
    n_ep = bench.size("endpoints", 4, 2)
    ep_mif = bench.size("endpoint_max_in_flight", 1000, 50)
    mif = bench.size("max_in_flight", n_ep * ep_mif, n_ep * ep_mif)
    events = bench.size("events", 100_000, 1_000)
    latency = float(opts.given.get("latency_ms") or 200.0)
    per = max(1, events // n_ep)
    bench.report.update(
        title=f"{per * n_ep:,} events, {n_ep} endpoints x max_in_flight {ep_mif}, "
        f"run --max-in-flight {mif}, receiver latency {latency:g} ms",
        endpoints=n_ep,
        endpoint_max_in_flight=ep_mif,
        max_in_flight=mif,
        receiver_latency_ms=latency,
    )
    rcv = await bench.receiver("receiver", latency_ms=latency)
    eps = [EndpointDef(f"/s/{i}", rcv, max_in_flight=ep_mif) for i in range(n_ep)]
    m = await drain_phase(bench, rcv, eps, per, max_in_flight=mif, label="run", sample_open=True)
    series = m.pop("open_series")
    opens = [o for _, o in series]
    reach = {}
    for frac in (0.25, 0.5, 0.9):
        goal = frac * mif
        reach[frac] = next((round(t, 2) for t, o in series if o >= goal), None)
    m["in_flight"] = {
        "peak": m["receiver_max_open"],
        "median_sampled": statistics.median(opens) if opens else None,
        "samples": [[round(t, 2), o] for t, o in series],
        "seconds_to_25pct": reach[0.25],
        "seconds_to_50pct": reach[0.5],
        "seconds_to_90pct": reach[0.9],
    }
    raw = await raw_ceiling(bench, rcv, secret=eps[0].secret, requests=per * n_ep, concurrency=mif)
    ratio = _report_raw(bench, m, raw)
    dpm = m["deliveries_per_min"]
    little = (dpm / 60) * (latency / 1000) if dpm else None
    table = drain_rows(m)
    table += [
        [
            "raw ceiling/min (aiohttp)",
            f"{_fmt_int(raw['per_min'])} (median of {len(raw['passes'])} x "
            f"{raw['requests_per_client']:,}, concurrency {mif})",
        ],
        ["ratio dispatcher/raw", "-" if ratio is None else f"{ratio:.2f}"],
        ["raw client CPU s / 1,000", _fmt(raw["cpu_s_per_1000"], 3)],
        ["in flight at receiver: peak", _fmt_int(m["in_flight"]["peak"])],
        ["in flight: median of samples", _fmt_int(m["in_flight"]["median_sampled"])],
        ["in flight by Little (rate x latency)", _fmt_int(little)],
        [
            "seconds to 25 / 50 / 90 % of max",
            " / ".join("-" if reach[f] is None else f"{reach[f]:.1f}" for f in (0.25, 0.5, 0.9)),
        ],
    ]
    smoke = opts.smoke
    verdicts = [
        _rate_verdict(TARGET_PER_MIN, dpm, smoke),
        _verdict(
            f"peak RSS < {SLOW_TARGET_RSS_MB:g} MB",
            None if smoke else m["peak_rss_mb"] < SLOW_TARGET_RSS_MB,
            f"{m['peak_rss_mb']:.1f} MB",
        ),
    ]
    bench.report["meets_target"] = (
        None if smoke else dpm >= TARGET_PER_MIN and m["peak_rss_mb"] < SLOW_TARGET_RSS_MB
    )
    return finish(bench, table, verdicts)


# ------------------------------------------------------------ many


@_scenario
async def run_many(bench: Bench, opts: Options) -> dict[str, Any]:
    n_ep = bench.size("endpoints", 1000, 20)
    events = bench.size("events", 200_000, 1_000)
    mif = bench.size("max_in_flight", 256, 64)
    ep_mif = opts.given.get("endpoint_max_in_flight")
    per = max(1, events // n_ep)
    bench.report.update(
        title=f"{per * n_ep:,} events, {n_ep:,} endpoints x {per}, "
        f"run --max-in-flight {mif}, endpoint max_in_flight {ep_mif or 'default (100)'}",
        endpoints=n_ep,
        per_endpoint=per,
        max_in_flight=mif,
    )
    rcv = await bench.receiver("receiver")
    eps = [EndpointDef(f"/e/{i}", rcv, max_in_flight=ep_mif) for i in range(n_ep)]
    m = await drain_phase(bench, rcv, eps, per, max_in_flight=mif, label="run")
    m.pop("open_series")
    start = m["started_wall_ts"]
    paths = m.pop("paths")
    done_at = sorted(
        paths[e.path]["last_ts"] - start for e in eps if e.path in paths
    )  # when each endpoint's last event arrived
    first_at = sorted(paths[e.path]["first_ts"] - start for e in eps if e.path in paths)
    counts = [paths.get(e.path, {}).get("count", 0) for e in eps]
    wrong = sum(1 for c in counts if c != per)
    if wrong:
        bench.problems.append(f"{wrong} endpoints did not get exactly {per} POSTs")
    m["endpoint_spread"] = {
        "first_post_p50_s": _pct(first_at, 0.5),
        "first_post_max_s": first_at[-1] if first_at else None,
        "done_min_s": done_at[0] if done_at else None,
        "done_p50_s": _pct(done_at, 0.5),
        "done_max_s": done_at[-1] if done_at else None,
        "endpoints_wrong_count": wrong,
    }
    bench.report["dispatcher"] = m
    sp = m["endpoint_spread"]
    table = drain_rows(m)
    table += [
        [
            "endpoint first POST p50 / max",
            f"{_fmt(sp['first_post_p50_s'])} / {_fmt(sp['first_post_max_s'])} s after start",
        ],
        [
            "endpoint done min / p50 / max",
            f"{_fmt(sp['done_min_s'])} / {_fmt(sp['done_p50_s'])} / "
            f"{_fmt(sp['done_max_s'])} s after start",
        ],
        ["endpoints with a wrong count", f"{wrong}"],
    ]
    dpm = m["deliveries_per_min"]
    verdicts = [_rate_verdict(TARGET_PER_MIN, dpm, opts.smoke, " (stage target)")]
    bench.report["meets_target"] = None if opts.smoke else dpm >= TARGET_PER_MIN
    return finish(bench, table, verdicts)


# ------------------------------------------------------------ two


@_scenario
async def run_two(bench: Bench, opts: Options) -> dict[str, Any]:
    events = bench.size("events", 200_000, 1_000)
    mif = bench.size("max_in_flight", 256, 64)
    ep_mif = bench.size("endpoint_max_in_flight", 2 * mif, 2 * mif)
    bench.report.update(
        title=f"{events:,} events, 2 x run --drain --max-in-flight {mif}, "
        f"one endpoint max_in_flight {ep_mif}",
        max_in_flight=mif,
        endpoint_max_in_flight=ep_mif,
    )
    rcv = await bench.receiver("receiver")
    eps = [EndpointDef("/hook", rcv, max_in_flight=ep_mif)]
    m = await drain_phase(bench, rcv, eps, events, processes=2, max_in_flight=mif, label="run")
    m.pop("open_series")
    m.pop("paths")
    per_proc = [(e or {}).get("delivered") for e in m["engine"]]
    raw = await raw_ceiling(
        bench, rcv, secret=eps[0].secret, requests=events // 2, concurrency=mif, clients=2
    )
    ratio = _report_raw(bench, m, raw)
    dpm = m["deliveries_per_min"]
    table = drain_rows(m)
    table += [
        ["delivered by process 1 / 2", " / ".join(_fmt_int(x) for x in per_proc)],
        ["exit codes", " / ".join(str(c) for c in m["exit_codes"])],
        [
            "raw ceiling/min (2 aiohttp clients)",
            f"{_fmt_int(raw['per_min'])} (median of {len(raw['passes'])} x 2 x "
            f"{raw['requests_per_client']:,}, concurrency {mif} each)",
        ],
        ["ratio dispatchers/raw", "-" if ratio is None else f"{ratio:.2f}"],
        ["raw client CPU s / 1,000", _fmt(raw["cpu_s_per_1000"], 3)],
    ]
    verdicts = [
        _rate_verdict(TWO_TARGET_PER_MIN, dpm, opts.smoke, " together"),
        _verdict(
            "no event sent twice",
            m["duplicates"] == 0,
            f"{m['duplicates']} duplicates at the receiver",
        ),
    ]
    bench.report["meets_target"] = (
        None if opts.smoke else dpm >= TWO_TARGET_PER_MIN and m["duplicates"] == 0
    )
    return finish(bench, table, verdicts)


# ------------------------------------------------------------ noisy


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
    meter = Meter(bench)
    await meter.start()
    seen = {"n": 0}

    async def healthy_count() -> int:
        s = await _stats_or_none(main, paths=True)
        if s is None:
            return seen["n"]
        seen["n"] = sum(v["count"] for k, v in s["paths"].items() if k in healthy_paths)
        return seen["n"]

    async def done() -> bool:
        return await healthy_count() >= expected

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
    runs, stopped_at, t0 = await run_procs(
        bench, [_dispatcher(*argv)], ["run"], on_tick=tick, stop_when=done, tick_s=0.2
    )
    run = runs[0]
    exit_after_term = (t0 + run.wall_s - stopped_at) if stopped_at is not None else None
    m_meter = await meter.stop()
    after = await main.stats(paths=True)
    after_bad = {k: await r.stats(paths=True) for k, r in bad_rcvs.items()}
    ids = [e.id for e in healthy]
    db = await db_results(bench, ids)
    db_all = await db_results(bench)
    await bench.drop_db()
    hp = {k: v for k, v in after["paths"].items() if k in healthy_paths}
    posts = sum(v["count"] for v in hp.values())
    duplicates = sum(v["duplicates"] for v in hp.values())
    last_ts = max((v["last_ts"] for v in hp.values()), default=None)
    seconds = (last_ts - t_wall0) if last_ts else float("nan")
    m = phase_metrics(
        runs,
        m_meter,
        db,
        enq,
        expected=expected,
        seconds=seconds,
        duplicates=duplicates,
        posts=posts,
    )
    # CPU per 1,000 over everything the process did (bad endpoints included).
    m["run_wall_s"] = round(run.wall_s, 3)
    m["sigterm_to_exit_s"] = None if exit_after_term is None else round(exit_after_term, 3)
    m["multi_attempt"] = db["multi_attempt"]
    bad_out = []
    for e in bad:
        b0 = before_bad[id(e.receiver)]["paths"].get(e.path, {"count": 0, "duplicates": 0})
        b1 = after_bad[id(e.receiver)]["paths"].get(e.path, {"count": 0, "duplicates": 0})
        counts = db_all["by_endpoint"].get(e.id, {})
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
    m["status_counts"] = _status_totals(db_all["by_endpoint"])
    check_phase(m, bench.problems, label, drain=False)
    if m["multi_attempt"]:
        bench.problems.append(f"{label}: {m['multi_attempt']} healthy rows took >1 attempt")
    progress(
        f"{label}: healthy {m['delivered']:,} in {seconds:.2f} s = "
        f"{m['deliveries_per_min']:,.0f}/min; exit {run.returncode}, "
        f"{m['sigterm_to_exit_s']} s after SIGTERM"
    )
    return m


@_scenario
async def run_noisy(bench: Bench, opts: Options) -> dict[str, Any]:
    n_ep = bench.size("endpoints", 20, 4)
    events = bench.size("events", 40_000, 800)
    per = max(1, events // n_ep)
    bad_per = per * 10
    mif = bench.size("max_in_flight", 256, 64)
    hang_timeout = 5000
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
                EndpointDef("/hang", hang, timeout_ms=hang_timeout),
                EndpointDef("/rate", main, rate_per_s=10.0),
                EndpointDef("/err", err),
            ]
        phases[label] = await _noisy_phase(
            bench, main, healthy, bad, per, bad_per if bad else 0, mif, label
        )
    solo, noisy = phases["solo"], phases["noisy"]
    ratio = (
        noisy["deliveries_per_min"] / solo["deliveries_per_min"]
        if solo["deliveries_per_min"]
        else None
    )
    bench.report["solo"] = solo
    bench.report["noisy"] = noisy
    bench.report["ratio_noisy_to_solo"] = None if ratio is None else round(ratio, 4)
    table = standard_rows(solo, label="solo") + standard_rows(noisy, label="noisy")
    table += [
        [
            "solo / noisy: run exit, s from SIGTERM",
            f"{solo['exit_codes'][0]}, {_fmt(solo['sigterm_to_exit_s'], 2)} s / "
            f"{noisy['exit_codes'][0]}, {_fmt(noisy['sigterm_to_exit_s'], 2)} s",
        ]
    ]
    for b in noisy["bad"]:
        counts = ", ".join(f"{k} {v:,}" for k, v in sorted(b["status_counts"].items()))
        table.append([f"bad {b['path']}", f"{b['receiver_posts']:,} POSTs; rows: {counts}"])
    table.append(["healthy rate noisy / solo", "-" if ratio is None else f"{ratio:.3f}"])
    verdicts = [
        _verdict(
            f"noisy/solo >= {NOISY_TARGET_RATIO:.2f}",
            None if opts.smoke or ratio is None else ratio >= NOISY_TARGET_RATIO,
            f"{_fmt_int(noisy['deliveries_per_min'])} vs "
            f"{_fmt_int(solo['deliveries_per_min'])}/min",
        )
    ]
    bench.report["meets_target"] = (
        None if opts.smoke or ratio is None else ratio >= NOISY_TARGET_RATIO
    )
    return finish(bench, table, verdicts)


# ------------------------------------------------------------ wake


@_scenario
async def run_wake(bench: Bench, opts: Options) -> dict[str, Any]:
    samples = bench.size("samples", 200, 20)
    idle_s = 0.5 if opts.smoke else 3.0
    gap = (0.05, 0.3)
    bench.report.update(
        title=f"{samples} single enqueues into an idle `dispatcher run`, "
        f"gaps {gap[0]:g}-{gap[1]:g} s, {idle_s:g} s idle first",
        samples=samples,
    )
    rcv = await bench.receiver("receiver", record_arrivals=samples + 10)
    await bench.fresh_db()
    ep = EndpointDef("/wake", rcv)
    await bench.add_endpoints([ep])
    conn = await asyncpg.connect(bench.bench_url, timeout=10)
    sent: dict[str, tuple[float, float]] = {}
    run_id = os.urandom(4).hex()
    payload = json.dumps(postback_payload(random.Random(3), 0), separators=(",", ":"))
    state = {"phase": "warmup", "i": 0, "err": ""}
    meter = Meter(bench)

    async def enqueue_one(event_id: str) -> None:
        t_before = time.time()
        await conn.fetchval(
            "SELECT dispatcher_enqueue($1, $2::json, $3, $4)",
            "bench.wake", payload, event_id, ep.id,
        )  # fmt: skip
        sent[event_id] = (t_before, time.time())  # autocommit: COMMIT has returned

    async def wait_arrival(event_id: str, limit_s: float) -> bool:
        end = time.monotonic() + limit_s
        while time.monotonic() < end:
            if event_id in await rcv.arrivals():
                return True
            await asyncio.sleep(0.05)
        return False

    async def driver() -> bool:
        # Warm-up: the worker is up, connected and listening.
        if not await wait_arrival_after(f"warm-{run_id}"):
            state["err"] = "warm-up event never arrived"
            return True
        await asyncio.sleep(idle_s)
        await meter.start()
        state["phase"] = "measuring"
        rng = random.Random(5)
        for i in range(samples):
            state["i"] = i
            await enqueue_one(f"wake-{run_id}-{i}")
            await asyncio.sleep(rng.uniform(*gap))
        # Everything has had at least a few seconds to arrive.
        await wait_arrival(f"wake-{run_id}-{samples - 1}", 10.0)
        await asyncio.sleep(1.0)
        return True

    async def wait_arrival_after(event_id: str) -> bool:
        await enqueue_one(event_id)
        return await wait_arrival(event_id, 30.0)

    driver_task: asyncio.Task[bool] | None = None

    async def stop_when() -> bool:
        nonlocal driver_task
        if driver_task is None:
            driver_task = asyncio.create_task(driver())
        if driver_task.done():
            driver_task.result()
            return True
        return False

    async def tick() -> None:
        if state["phase"] == "measuring":
            meter.sample()
        progress(f"wake: {state['phase']} {state['i']}/{samples}", transient=True)

    progress("wake: dispatcher run --max-in-flight 256")
    try:
        runs, stopped_at, t0 = await run_procs(
            bench,
            [_dispatcher("run", "--max-in-flight", "256")],
            ["run"],
            on_tick=tick,
            stop_when=stop_when,
            tick_s=0.2,
        )
    finally:
        if driver_task is not None and not driver_task.done():
            driver_task.cancel()
            with contextlib.suppress(BaseException):
                await driver_task
        await conn.close()
    if state["err"]:
        raise BenchError(state["err"])
    m_meter = await meter.stop() if hasattr(meter, "counters0") else None
    arrivals = await rcv.arrivals()
    stats = await rcv.stats()
    db = await db_results(bench)
    await bench.drop_db()
    lat = []
    lat_before = []
    missing = 0
    for i in range(samples):
        eid = f"wake-{run_id}-{i}"
        if eid not in arrivals:
            missing += 1
            continue
        t_before, t_commit = sent[eid]
        lat.append((arrivals[eid] - t_commit) * 1000)
        lat_before.append((arrivals[eid] - t_before) * 1000)
    run = runs[0]
    m: dict[str, Any] = {
        "samples": samples,
        "arrived": len(lat),
        "missing": missing,
        "p50_ms": _pct(lat, 0.5),
        "p90_ms": _pct(lat, 0.9),
        "p99_ms": _pct(lat, 0.99),
        "max_ms": max(lat) if lat else None,
        "min_ms": min(lat) if lat else None,
        "negative": sum(1 for x in lat if x < 0),
        "from_call_start_p50_ms": _pct(lat_before, 0.5),
        "from_call_start_p99_ms": _pct(lat_before, 0.99),
        "commit_call_p50_ms": _pct([(b - a) * 1000 for a, b in sent.values()], 0.5),
        "duplicates": stats["duplicates"],
        "exit_code": run.returncode,
        "peak_rss_mb": round(run.maxrss_mb, 1),
        "dispatcher_cpu_s": round(run.cpu_s, 3),
        "run_wall_s": round(run.wall_s, 3),
        "dispatcher_cpu_per_wall": round(run.cpu_s / run.wall_s, 4),
        "sigterm_to_exit_s": (
            None if stopped_at is None else round(t0 + run.wall_s - stopped_at, 3)
        ),
        "lag_p50_ms": db["lag_p50_ms"],
        "lag_p99_ms": db["lag_p99_ms"],
        "http_p50_ms": db["http_p50_ms"],
        "meter": m_meter,
        "db_xacts_per_1000": (
            round(m_meter["db_counters"]["xact_commit"] * 1000 / samples, 1)
            if m_meter and m_meter["db_counters"]
            else None
        ),
        "postgres_cpu_s_per_1000": (
            round(m_meter["postgres_cpu_s"] * 1000 / samples, 3)
            if m_meter and m_meter["postgres_cpu_s"] is not None
            else None
        ),
    }
    bench.report["wake"] = m
    if missing:
        bench.problems.append(f"{missing} of {samples} events never arrived")
    if stats["duplicates"]:
        bench.problems.append(f"{stats['duplicates']} duplicate POSTs")
    if run.returncode != 0:
        bench.problems.append(f"dispatcher run exited {run.returncode}")
    table = [
        ["wake latency p50 / p90 / p99", " / ".join(
            _fmt(m[k]) for k in ("p50_ms", "p90_ms", "p99_ms")) + " ms"],
        ["wake latency min / max", f"{_fmt(m['min_ms'])} / {_fmt(m['max_ms'])} ms"],
        ["  from before the call, p50 / p99",
         f"{_fmt(m['from_call_start_p50_ms'])} / {_fmt(m['from_call_start_p99_ms'])} ms"],
        ["  dispatcher_enqueue call p50", f"{_fmt(m['commit_call_p50_ms'], 2)} ms"],
        ["lag p50 / p99 (DB created->delivered)",
         f"{_fmt_int(m['lag_p50_ms'])} / {_fmt_int(m['lag_p99_ms'])} ms"],
        ["HTTP p50 (as measured)", f"{_fmt(m['http_p50_ms'])} ms"],
        ["dispatcher CPU s / wall s (mostly idle)", _fmt(m["dispatcher_cpu_per_wall"], 3)],
        ["PostgreSQL CPU s / 1,000 (measuring)", _fmt(m["postgres_cpu_s_per_1000"], 3)],
        ["DB transactions / 1,000 (measuring)", _fmt(m["db_xacts_per_1000"])],
        ["dispatcher peak RSS", f"{_fmt(m['peak_rss_mb'])} MB"],
        ["arrived", f"{m['arrived']:,} of {samples:,} (lost {missing})"],
        ["duplicates", f"{m['duplicates']:,}"],
        ["run exit, s from SIGTERM", f"{run.returncode}, {_fmt(m['sigterm_to_exit_s'], 2)} s"],
    ]  # fmt: skip
    p99 = m["p99_ms"]
    ok = None if opts.smoke or p99 is None else p99 < WAKE_TARGET_P99_MS
    verdicts = [_verdict(f"p99 < {WAKE_TARGET_P99_MS:g} ms", ok, f"p99 {_fmt(p99)} ms")]
    bench.report["meets_target"] = ok
    return finish(bench, table, verdicts)


RUNNERS: dict[str, Callable[[Options, str], Awaitable[dict[str, Any]]]] = {
    "slow200": run_slow200,
    "many": run_many,
    "noisy": run_noisy,
    "two": run_two,
    "wake": run_wake,
}
