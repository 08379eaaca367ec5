"""faults: one endpoint behind a receiver that misbehaves some of the time.

Five cases, each on a fresh database with the same events: healthy, 30 %
connection resets, 30 % 500s, 30 % requests that hang past the 1 s timeout,
10 % 2xx answers whose body is cut short. One `dispatcher run` (not --drain:
retries must come due) until every event is delivered or dead, then SIGTERM.
Reports deliveries/s, attempts per event, breaker openings and dead letters;
nothing may be lost. Retries are quick (10-200 ms) so a case measures how
the worker rides through the fault, not the backoff.
"""

from __future__ import annotations

import time
from typing import Any

from ..bench import Bench, EndpointDef, Options, run_argv, scenario
from ..database import Progress
from ..output import fmt_int, verdict
from ..processes import dispatcher_argv

CASES: tuple[tuple[str, str | None, float], ...] = (
    ("healthy", None, 0.0),
    ("30 % resets", "reset", 0.3),
    ("30 % 500s", "500", 0.3),
    ("30 % hangs", "hang", 0.3),
    ("10 % cut bodies", "cut", 0.1),
)
# What `--case` names each case by (the receiver's fault kind).
FAULT_KINDS = tuple(kind or "healthy" for _, kind, _ in CASES)
ENDPOINT = {"max_attempts": 50, "retry_base_ms": 10, "retry_cap_ms": 200}


async def _case(
    bench: Bench, opts: Options, kind: str | None, share: float, events: int, mif: int
) -> dict[str, Any]:
    rcv = await bench.receiver(f"receiver-{kind or 'ok'}", fault=kind, fault_share=share)
    ep = EndpointDef("/f", rcv, max_in_flight=mif, timeout_ms=1000, settings=dict(ENDPOINT))
    await bench.fresh_db()
    await bench.add_endpoints([ep])
    await bench.enqueue([(ep, events)])
    async with Progress(bench.bench_url) as progress:

        async def finished() -> bool:
            return await progress.finished() >= events

        runs, stopped_at, t0 = await bench.children.run_together(
            [dispatcher_argv(*run_argv(opts, mif, drain=False))],
            ["run"],
            limit_s=min(bench.run_limit_s(), 180.0),
            stop_when=finished,
            tick_s=0.1,
            on_tick_every_s=0.1,
        )
        seconds = (stopped_at if stopped_at is not None else time.perf_counter()) - t0
        m: dict[str, Any] = await progress.outcome()
    await bench.drop_db()
    await rcv.close()
    bench.receivers.remove(rcv)
    m["seconds"] = round(seconds, 2)
    m["per_s"] = round(m["delivered"] / seconds, 1) if seconds > 0 else None
    m["attempts_per_event"] = round(m["attempts"] / events, 2)
    m["lost"] = events - m["delivered"] - m["dead"]
    m["exit_codes"] = [r.returncode for r in runs]
    return m


@scenario
async def run_faults(bench: Bench, opts: Options) -> dict[str, Any]:
    events = bench.size("events", 5_000, 200)
    mif = bench.size("max_in_flight", 100, 100)
    bench.report.update(
        title=f"{events:,} events per case, one endpoint (max_in_flight {mif}, timeout 1 s)",
        events=events,
        max_in_flight=mif,
    )
    cases: dict[str, dict[str, Any]] = {}
    table: list[list[str]] = [["case", "deliveries/s  (attempts/event, breaker opened, dead)"]]
    wanted = opts.given.get("case") or FAULT_KINDS
    chosen = [c for c, name in zip(CASES, FAULT_KINDS, strict=True) if name in wanted]
    for label, kind, share in chosen:
        m = cases[label] = await _case(bench, opts, kind, share, events, mif)
        table.append(
            [
                label,
                f"{fmt_int(m['per_s'])}/s  ({m['attempts_per_event']:.2f}, "
                f"{m['opened']}, {m['dead']})",
            ]
        )
        if m["lost"]:
            bench.problems.append(f"{label}: {m['lost']} events neither delivered nor dead")
    bench.report["cases"] = cases
    healthy = (cases["healthy"]["per_s"] or 0.0) if "healthy" in cases else 0.0
    verdicts = [
        verdict(
            f"{label}: nothing lost, breaker never opened",
            cases[label]["lost"] == 0 and cases[label]["opened"] == 0,
            f"{cases[label]['per_s']}/s, {cases[label]['per_s'] / healthy:.2f} of healthy"
            if healthy and cases[label]["per_s"]
            else "-",
        )
        for label, _, _ in chosen
    ]
    return bench.finish(table, verdicts)
