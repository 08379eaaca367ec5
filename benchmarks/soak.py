"""The soak: `make soak` or `python -m benchmarks.soak [--minutes 20] ...`.

One `dispatcher run` with retention on (delivered rows pruned after
--retention-s, as are dead and cancelled ones, attempts and payloads) against one
receiver answering in 20 ms. First the capacity:
producers commit as fast as they can for a short while and the worker
delivers it all; capacity = events / the longer of the two. Then a steady
offered load of half that (or --rate), from --producers connections, one
event per transaction through `dispatcher_enqueue`, for --minutes. Every
--sample-s (60): the created -> delivered lag p50/p99 of the rows delivered
in that interval, the worker's RSS, webhook_live's heap and index sizes,
its dead rows and the vacuum / autovacuum counts from pg_stat_user_tables;
the sizes of history, the attempt log, the payload store and the dedup keys.

Writes soak.json (everything), soak.csv (one row per interval) and soak.png
(a chart, matplotlib) into --out-dir, and each interval's row as it is
taken into soak-rows.jsonl there. Exit 0 when nothing was lost or sent
twice; trends are for a reader to judge (the JSON has first/last ratios).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import csv
import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

import asyncpg
import uvloop

from .bench import DEFAULT_DB, Bench, EndpointDef, Options, scenario
from .database import Progress, db_results
from .driven import run_driven
from .errors import BenchError, UsageError
from .output import progress
from .payloads import postback_payload
from .processes import dispatcher_argv
from .producing import close_all, connect_producers, enqueue_args, paced
from .tablestats import autovacuum_setting, db_now, tables, window

RECEIVER_MS = 20.0
# The tables retention keeps from growing, beside the live queue (tablestats).
GROWING = (("history", "webhook_history"), ("payloads", "event_payloads"), ("keys", "dedup_keys"))


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def parse(argv: list[str]) -> argparse.Namespace:
    p = _Parser(prog="python -m benchmarks.soak", description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=20.0, help="soak length (20)")
    p.add_argument("--rate", type=float, default=None, help="events/s (half the capacity)")
    p.add_argument("--producers", type=int, default=8, help="producer connections (8)")
    p.add_argument("--sample-s", type=float, default=60.0, help="interval between samples (60)")
    p.add_argument("--capacity-s", type=float, default=15.0, help="capacity burst length (15)")
    p.add_argument("--retention-s", type=float, default=120.0, help="delivered rows kept (120)")
    p.add_argument("--out-dir", type=Path, default=Path("soak-results"), help="(./soak-results)")
    p.add_argument("--db-name", default=f"{DEFAULT_DB}_soak")
    a = p.parse_args(argv)
    if not 0 < a.minutes <= 24 * 60:
        raise UsageError("--minutes must be in (0, 1440]")
    if a.rate is not None and a.rate <= 0:
        raise UsageError("--rate must be positive")
    if not 1 <= a.producers <= 90:
        raise UsageError("--producers must be 1..90")
    if a.sample_s < 1 or a.capacity_s < 1 or a.retention_s < 1:
        raise UsageError("--sample-s, --capacity-s and --retention-s must be at least 1")
    if not a.db_name.replace("_", "").isalnum():
        raise UsageError("--db-name must be letters, digits and underscores")
    return a


def _rss_mb(pid: int) -> float | None:
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    return None


def _worker_pid(pids: list[int]) -> int | None:
    """The `dispatcher run` child among the bench's children (not the receiver)."""
    for pid in pids:
        with contextlib.suppress(OSError):
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if b"run" in argv and any(a.endswith(b"dispatcher") for a in argv):
                return pid
    return None


def _row(t_s: float, offered: int, win: dict[str, Any], rss: float | None,
         tbl: dict[str, dict[str, int]]) -> dict[str, Any]:  # fmt: skip
    q = tbl.get("webhook_live", {})
    lat = tbl.get("endpoint_latency", {})
    return {
        "t_min": round(t_s / 60, 2),
        "enqueued": offered,
        "delivered": win["delivered"],
        "lag_p50_ms": win["lag_p50_ms"],
        "lag_p99_ms": win["lag_p99_ms"],
        "rss_mb": rss,
        "queue_heap_mb": round(q.get("heap_bytes", 0) / 2**20, 2),
        "queue_index_mb": round(q.get("index_bytes", 0) / 2**20, 2),
        "queue_total_mb": round(q.get("total_bytes", 0) / 2**20, 2),
        "queue_live": q.get("live"),
        "queue_dead": q.get("dead"),
        "queue_vacuums": q.get("vacuum_count"),
        "queue_autovacuums": q.get("autovacuum_count"),
        "latency_total_mb": round(lat.get("total_bytes", 0) / 2**20, 2),
        "latency_dead": lat.get("dead"),
        **{
            f"{name}_total_mb": round(tbl.get(table, {}).get("total_bytes", 0) / 2**20, 2)
            for name, table in GROWING
        },
        "history_dead": tbl.get("webhook_history", {}).get("dead"),
    }


def chart(rows: list[dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = [r["t_min"] for r in rows]
    fig, ax = plt.subplots(2, 2, figsize=(11, 7), sharex=True)
    a = ax[0][0]
    a.plot(t, [r["lag_p50_ms"] for r in rows], marker="o", label="p50")
    a.plot(t, [r["lag_p99_ms"] for r in rows], marker="o", label="p99")
    a.set_title("lag created -> delivered (ms)")
    a.legend()
    a = ax[0][1]
    a.plot(t, [r["rss_mb"] for r in rows], marker="o", color="tab:green")
    a.set_title("dispatcher RSS (MB)")
    a = ax[1][0]
    a.plot(t, [r["queue_heap_mb"] for r in rows], marker="o", label="live heap")
    a.plot(t, [r["queue_index_mb"] for r in rows], marker="o", label="live indexes")
    for key, label in (
        ("history_total_mb", "history"),
        ("latency_total_mb", "attempts"),
        ("payloads_total_mb", "payloads"),
        ("keys_total_mb", "dedup keys"),
    ):
        a.plot(t, [r[key] for r in rows], label=label)  # fmt: skip
    a.set_title("sizes, with indexes (MB)")
    a.legend(fontsize=7)
    a = ax[1][1]
    a.plot(t, [r["queue_dead"] for r in rows], marker="o", color="tab:red", label="dead rows")
    a.set_title("webhook_live dead rows; vacuums")
    b = a.twinx()
    b.step(t, [r["queue_vacuums"] for r in rows], where="post", color="tab:gray",
           label="vacuums (ours)")  # fmt: skip
    b.step(t, [r["queue_autovacuums"] for r in rows], where="post", color="tab:purple",
           label="autovacuums")  # fmt: skip
    a.legend(loc="upper left")
    b.legend(loc="upper right")
    for a in ax[1]:
        a.set_xlabel("minutes")
    for a in (x for row in ax for x in row):
        a.set_ylim(bottom=0)
        a.grid(alpha=0.3)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _trend(rows: list[dict[str, Any]], key: str) -> dict[str, Any] | None:
    """First and last value after warm-up (the first interval), and their ratio."""
    vals = [r[key] for r in rows[1:] if r[key] is not None] or [
        r[key] for r in rows if r[key] is not None
    ]
    if not vals:
        return None
    first, last = vals[0], vals[-1]
    return {"first": first, "last": last, "max": max(vals),
            "ratio": round(last / first, 2) if first else None}  # fmt: skip


async def soak_body(bench: Bench, opts: Options, a: argparse.Namespace) -> dict[str, Any]:
    rcv = await bench.receiver("receiver", latency_ms=RECEIVER_MS)
    await bench.fresh_db()
    ep = EndpointDef("/soak", rcv)
    await bench.add_endpoints([ep])
    payload = json.dumps(postback_payload(random.Random(3), 0), separators=(",", ":"))
    admin = await asyncpg.connect(bench.bench_url, timeout=10)
    conns = await connect_producers(bench.bench_url, a.producers)
    run_id = os.urandom(3).hex()
    state: dict[str, Any] = {"phase": "capacity", "err": "", "rows": []}
    report = bench.report
    report["autovacuum"] = await autovacuum_setting(admin)

    def run_pid() -> int | None:
        return _worker_pid(list(bench.children.live))

    async def capacity() -> float:
        t0 = time.monotonic()
        n = await paced(conns, 1e9, a.capacity_s, enqueue_args(f"cap-{run_id}", payload))
        t_enq = time.monotonic() - t0
        async with Progress(bench.bench_url) as prog:
            while await prog.finished() < n:
                if time.monotonic() - t0 > a.capacity_s * 20 + 60:
                    raise BenchError("the capacity burst was not delivered in time")
                await asyncio.sleep(0.1)
        t_all = time.monotonic() - t0
        cap = n / max(t_enq, t_all)
        report["capacity"] = {
            "events": n,
            "enqueue_s": round(t_enq, 2),
            "delivered_s": round(t_all, 2),
            "events_per_s": round(cap, 1),
        }
        progress(f"soak: capacity {cap:,.0f} events/s ({n:,} events, enqueue {n / t_enq:,.0f}/s)")
        return cap

    async def driver() -> None:
        rate = a.rate or await capacity() / 2
        report["offered_per_s"] = round(rate, 1)
        progress(f"soak: {a.minutes:g} min at {rate:,.0f} events/s from {a.producers} producers")
        state["phase"] = "soak"
        done = [0] * a.producers
        load = asyncio.create_task(
            paced(conns, rate, a.minutes * 60, enqueue_args(f"soak-{run_id}", payload), done=done),
            name="bench-soak-load",
        )
        t0 = time.monotonic()
        a.out_dir.mkdir(parents=True, exist_ok=True)
        (a.out_dir / "soak-rows.jsonl").write_text("")
        since = await db_now(admin)
        last_done = 0
        try:
            while not load.done():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(load), a.sample_s)
                until = await db_now(admin)
                win = await window(admin, since, until)
                since = until
                pid = run_pid()
                rss = _rss_mb(pid) if pid else None
                offered, last_done = sum(done) - last_done, sum(done)
                row = _row(time.monotonic() - t0, offered, win, rss, await tables(admin))
                state["rows"].append(row)
                # Kept as it is taken: a soak of hours that fails late
                # still leaves what it measured.
                with (a.out_dir / "soak-rows.jsonl").open("a") as f:
                    f.write(json.dumps(row, default=str) + "\n")
                progress(
                    f"soak: {row['t_min']:.1f} min lag p50/p99 {row['lag_p50_ms']}/"
                    f"{row['lag_p99_ms']} ms, rss {rss} MB, queue {row['queue_total_mb']} MB,"
                    f" dead {row['queue_dead']}, vacuums {row['queue_vacuums']}"
                )
        finally:
            if not load.done():
                load.cancel()
        state["soaked"] = await load
        state["phase"] = "draining"
        end = time.monotonic() + 120
        while time.monotonic() < end:
            res = await db_results(bench.bench_url)
            if res["rows"] - res["delivered"] == 0:
                break
            await asyncio.sleep(0.5)

    try:
        runs = await run_driven(
            bench, [dispatcher_argv("run")], ["run"], driver,
            lambda: f"soak: {state['phase']}", tick_s=0.5,
        )  # fmt: skip
    finally:
        await close_all(conns)
        await admin.close()
    stats = await rcv.stats()
    res = await db_results(bench.bench_url)
    await bench.drop_db()
    rows: list[dict[str, Any]] = state["rows"]
    run = runs[0]
    # Retention deletes delivered rows: what is left must be delivered, and
    # the receiver must have seen each id once.
    undelivered = int(res["rows"]) - int(res["delivered"])
    report.update(
        minutes=a.minutes, producers=a.producers, receiver_ms=RECEIVER_MS,
        retention_s=a.retention_s, sample_s=a.sample_s, intervals=rows,
        enqueued=state.get("soaked"), receiver_posts=stats.get("count"),
        duplicates=stats["duplicates"], undelivered=undelivered,
        exit_code=run.returncode, peak_rss_mb=round(run.maxrss_mb, 1),
        trends={k: _trend(rows, k) for k in ("lag_p50_ms", "lag_p99_ms", "rss_mb",
                                             "queue_total_mb", "queue_dead",
                                             "history_total_mb", "latency_total_mb")},
    )  # fmt: skip
    if undelivered:
        bench.problems.append(f"{undelivered} rows not delivered at the end")
    if stats["duplicates"]:
        bench.problems.append(f"{stats['duplicates']} duplicate POSTs")
    if run.returncode != 0:
        bench.problems.append(f"dispatcher run exited {run.returncode}")
    return bench.finish([], [])


def write_outputs(report: dict[str, Any], out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = report.get("intervals") or []
    (out_dir / "soak.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    with (out_dir / "soak.csv").open("w", newline="") as f:
        if rows:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    if rows:
        title = (
            f"soak {report['date']}: {report.get('offered_per_s')} events/s offered, "
            f"{report['producers']} producers, {report['receiver_ms']:g} ms receiver, "
            f"retention {report['retention_s']:g} s, autovacuum {report.get('autovacuum')}"
        )
        chart(rows, out_dir / "soak.png", title)


async def main(argv: list[str]) -> int:
    try:
        a = parse(argv)
    except UsageError as exc:
        sys.stderr.write(f"soak: error: {exc}\n")
        return 2
    url = os.environ.get("DATABASE_URL")
    if not url:
        sys.stderr.write("soak: error: set DATABASE_URL (a server it may create databases on)\n")
        return 2
    opts = Options(
        scenario="soak", timeout_s=a.minutes * 60 + a.capacity_s * 20 + 600,
        db_name=a.db_name,
        # Every time-partitioned table's retention (and with it the dedup
        # window, cut to the shortest final one): what plateaus is all of it.
        extra_env={f"DISPATCHER_RETENTION_{name}_S": str(a.retention_s)
                   for name in ("DELIVERED", "DEAD", "CANCELLED", "ATTEMPTS", "PAYLOAD")},
    )  # fmt: skip

    @scenario
    async def body(bench: Bench, o: Options) -> dict[str, Any]:
        return await soak_body(bench, o, a)

    try:
        report = await body(opts, url)
    except (BenchError, OSError, asyncpg.PostgresError, TimeoutError) as exc:
        sys.stderr.write(f"soak: error: {exc}\n")
        return 1
    write_outputs(report, a.out_dir)
    progress(f"soak: wrote {a.out_dir}/soak.json, soak.csv, soak.png")
    sys.stdout.write(json.dumps({k: report.get(k) for k in (
        "ok", "problems", "offered_per_s", "capacity", "trends", "undelivered",
        "duplicates", "peak_rss_mb", "autovacuum")}, default=str) + "\n")  # fmt: skip
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(int(uvloop.run(main(sys.argv[1:]))))
