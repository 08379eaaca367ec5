"""cluster: the cluster rig (benchmarks/rig/) in synchronous and then
asynchronous replication, each fault injected while a producer enqueues a
steady stream into the current leader and two worker hosts deliver it to one
endpoint. One row per fault and mode: enqueued, delivered, duplicates
against what was in flight at the fault, lost, and how long deliveries
stalled. --smoke: synchronous mode, the leader killed and a worker host cut
off. Needs root, Patroni, etcd and iptables; it runs its own PostgreSQL
cluster and ignores DATABASE_URL.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from ..bench import Options
from ..errors import BenchError
from ..meters import machine_info
from ..output import fmt, verdict
from ..rig.faults import FAULTS, PARTITION_S, run_mode
from ..rig.rig import unavailable

SMOKE_FAULTS = ("kill_leader", "partition_worker")
HEADER = [
    "fault", "mode", "enqueued", "delivered", "dup / in flight", "lost",
    "stall s", "back s", "steady s", "w1 back s",
]  # fmt: skip


def row(m: dict[str, Any]) -> list[str]:
    in_flight = f"{m['in_flight_rows']} rows, {m['in_flight_http']} http"
    return [
        m["fault"],
        m["mode"][:5],
        f"{m['enqueued']:,}",
        f"{m['delivered']:,}",
        f"{m['duplicates']} / {in_flight}",
        str(m["lost"]),
        fmt(m["stall_s"]),
        fmt(m["back_s"]),
        fmt(m["steady_s"]),
        fmt(m.get("worker_back_after_heal_s")),
    ]


def judge(results: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """Verdicts, and the problems that fail the run: anything lost under
    synchronous replication, more re-sent than was in flight there, or
    deliveries that never came back."""
    verdicts, problems = [], []
    for m in results:
        name = f"{m['fault']} ({m['mode']})"
        bound = max(m["in_flight_rows"], m["in_flight_http"])
        verdicts.append(
            verdict(
                f"{name}: 0 lost, duplicates <= in flight",
                m["lost"] == 0 and m["duplicates"] <= bound,
                f"lost {m['lost']}, duplicates {m['duplicates']} of {bound} in flight",
            )
        )
        if m["mode"] == "synchronous" and m["lost"]:
            problems.append(f"{name}: {m['lost']} acknowledged events lost")
        if m["mode"] == "synchronous" and m["duplicates"] > bound:
            problems.append(f"{name}: {m['duplicates']} duplicates, {bound} were in flight")
        if m["steady_s"] is None:
            problems.append(f"{name}: deliveries never got back to a steady rate")
    return verdicts, problems


async def run_cluster(opts: Options, admin_url: str) -> dict[str, Any]:
    del admin_url  # the rig runs its own cluster
    why = unavailable()
    if why:
        raise BenchError(why)
    rate = int(opts.given.get("rate") or 200)
    latency_ms = float(opts.given.get("latency_ms") or 200.0)
    started = time.monotonic()
    report: dict[str, Any] = {
        "scenario": "cluster",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine_info(),
        "smoke": opts.smoke,
        "title": f"{rate} events/s to one endpoint answering in {latency_ms:g} ms, "
        f"2 worker hosts, Patroni (ttl 10 s), partitions {PARTITION_S:g} s",
    }
    modes = (True,) if opts.smoke else (True, False)
    faults = SMOKE_FAULTS if opts.smoke else FAULTS
    results: list[dict[str, Any]] = []
    for synchronous in modes:
        results += await run_mode(synchronous, faults, rate=rate, latency_ms=latency_ms)
    verdicts, problems = judge(results)
    report.update(
        results=results,
        table=[HEADER, *map(row, results)],
        verdicts=verdicts,
        problems=problems,
        ok=not problems,
        # Re-sends of what was in flight are expected; render's default
        # line ("no duplicates") would say otherwise.
        correctness="correctness: ok (nothing lost, duplicates within what was in flight)",
        total_s=round(time.monotonic() - started, 1),
    )
    return report
