"""The benchmark harness's command line: `dispatcher bench [SCENARIO] [options]`
or `python -m benchmarks …`.

Scenarios (benchmarks/scenarios/, one module each but slow.py): fast (the
default), slow200, slow500, slowmix, many, noisy, two, wake, faults,
internet, fifo, filters, https, tracing, tenants, cluster (the Patroni rig, root
only), and `all`, which runs each in turn but cluster. They stand on shared
modules, lowest first:

    errors, output, payloads      values, formatting, what is sent
    processes, rawclient          child processes; the raw aiohttp ceiling
    receiver_control, database    the receiver process; the bench database
    tlsca                         a throwaway CA for https receivers
    meters                        CPU, pg_stat_database, machine facts
    bench, phases                 one scenario run; drain and raw phases
    scenarios/*                   fast, slow200/500/mix, many, noisy, two, ...
    harness (this module)         arguments, signals, output, exit status

The exit status is 0 when the run is correct (nothing lost, no duplicates,
every child exited 0), 1 otherwise or on an operational failure, 2 for bad
arguments. Missing a throughput target does not fail the run. Progress goes
to stderr; every wait is bounded by --timeout-s (default 600); everything
runs on 127.0.0.1.

`python -m benchmarks.harness raw …` is kept as another name for
`python -m benchmarks.rawclient …`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any, NoReturn

import aiohttp
import asyncpg
import uvloop

from dispatcher.db.embedded import embedded_url
from dispatcher.settings import Settings

from . import rawclient
from .bench import DEFAULT_DB, Options
from .errors import BenchError, UsageError
from .output import progress, render
from .scenarios import NOT_IN_ALL, OWN_DATABASE, RUNNERS
from .scenarios.faults import FAULT_KINDS


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="dispatcher bench",
        description="Benchmark harness. Scenarios: " + ", ".join(RUNNERS) + ", all.",
    )
    p.add_argument("scenario", nargs="?", default="fast", choices=[*RUNNERS, "all"])
    p.add_argument("--events", type=int, default=None, help="deliveries (per scenario)")
    p.add_argument(
        "--max-in-flight", type=int, default=None, help="run --max-in-flight (fast: 256)"
    )
    p.add_argument("--endpoint-max-in-flight", type=int, default=None, help="(fast: 256)")
    p.add_argument("--endpoints", type=int, default=None, help="endpoints (slow*, many, noisy)")
    p.add_argument("--samples", type=int, default=None, help="wake: enqueues measured (200)")
    p.add_argument("--producers", type=int, default=None, help="producers: connections (16)")
    p.add_argument("--keys", type=int, default=None, help="fifo: ordering keys (1000)")
    p.add_argument("--rows", type=int, default=None, help="history: rows of each kind (10 M)")
    p.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="https: rounds per protocol (2); tracing: rounds off and on (3)",
    )
    p.add_argument("--rate", type=int, default=None, help="events/s: tenants b's (20), cluster")
    p.add_argument(
        "--case", action="append", default=None, choices=FAULT_KINDS,
        help="faults: run only this case (repeatable; default all five)",
    )  # fmt: skip
    p.add_argument("--batch-size", type=int, default=None, help="run --batch-size (default)")
    p.add_argument("--raw-requests", type=int, default=None, help="min(events, 50000)")
    p.add_argument("--raw-passes", type=int, default=None, help="raw ceiling passes (3)")
    p.add_argument("--latency-ms", type=float, default=0.0, help="receiver response delay")
    p.add_argument("--timeout-s", type=float, default=600.0, help="overall bound (600)")
    p.add_argument("--db-name", default=None, help=f"bench database ({DEFAULT_DB})")
    p.add_argument("--smoke", action="store_true", help="a few hundred events, one raw pass")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.add_argument("--out", type=Path, default=None, help="also write the JSON report here")
    return p


def parse_options(argv: list[str]) -> Options:
    if argv and argv[0] == "--":
        argv = argv[1:]
    a = build_parser().parse_args(argv)
    given = {k: v for k, v in vars(a).items() if v is not None}
    raw_passes = a.raw_passes if a.raw_passes is not None else (1 if a.smoke else 3)
    db_name = a.db_name or (f"{DEFAULT_DB}_smoke_{os.getpid()}" if a.smoke else DEFAULT_DB)
    for name, key, lo in (
        ("--events", "events", 1),
        ("--max-in-flight", "max_in_flight", 1),
        ("--endpoint-max-in-flight", "endpoint_max_in_flight", 1),
        ("--raw-requests", "raw_requests", 1),
        ("--raw-passes", "raw_passes", 0),
        ("--endpoints", "endpoints", 1),
        ("--samples", "samples", 1),
        ("--producers", "producers", 1),
        ("--rows", "rows", 1),
        ("--keys", "keys", 1),
        ("--rounds", "rounds", 1),
        ("--rate", "rate", 1),
        ("--batch-size", "batch_size", 1),
    ):
        if given.get(key, lo) < lo:
            raise UsageError(f"{name} must be at least {lo}")
    for name, key, hi in (
        ("--events", "events", 10_000_000),
        ("--endpoints", "endpoints", 10_000),
        ("--samples", "samples", 100_000),
        ("--producers", "producers", 90),
        ("--rounds", "rounds", 20),
        ("--rate", "rate", 1000),
    ):
        if given.get(key, 0) > hi:
            raise UsageError(f"{name} must be at most {hi:,}")
    if not 0 < a.timeout_s <= 24 * 3600:
        raise UsageError("--timeout-s must be in (0, 86400]")
    if not 0 <= a.latency_ms <= 60_000:
        raise UsageError("--latency-ms must be 0..60000")
    if not db_name.replace("_", "").isalnum() or len(db_name) > 63:
        raise UsageError("--db-name must be letters, digits and underscores (max 63)")
    return Options(
        scenario=a.scenario,
        timeout_s=a.timeout_s,
        db_name=db_name,
        json=a.json,
        smoke=a.smoke,
        out=a.out,
        batch_size=a.batch_size,
        raw_passes=raw_passes,
        given=given,
    )


def _admin_url(settings: Any) -> str:
    url = getattr(settings, "database_url", None) or os.environ.get("DATABASE_URL")
    if url:
        return str(url)
    home = getattr(settings, "home", None) or Settings.from_env().home
    progress(f"DATABASE_URL is unset: using the embedded PostgreSQL under {home}")
    return embedded_url(Path(home))


async def run_scenarios(opts: Options, admin_url: str) -> dict[str, Any]:
    """One scenario's report, or for `all` one document holding each report
    (each scenario bounded by its own --timeout-s)."""
    if opts.scenario != "all":
        return await RUNNERS[opts.scenario](opts, admin_url)
    reports = []
    for name, runner in RUNNERS.items():
        if name in NOT_IN_ALL:
            continue
        progress(f"=== scenario {name}")
        try:
            rep = await runner(dataclasses.replace(opts, scenario=name), admin_url)
        except BenchError as exc:
            rep = {"scenario": name, "ok": False, "problems": [str(exc)], "error": str(exc)}
        reports.append(rep)
    return {
        "scenario": "all",
        "reports": reports,
        "ok": all(r.get("ok") for r in reports),
        "problems": [f"{r['scenario']}: {p}" for r in reports for p in r.get("problems", [])],
    }


async def main(argv: list[str], settings: Any = None) -> int:
    """Entry point of `dispatcher bench ARGS…` and `python -m benchmarks ARGS…`."""
    try:
        opts = parse_options(list(argv))
    except UsageError as exc:
        sys.stderr.write(f"bench: error: {exc}\n")
        return 2
    # SIGTERM / SIGINT cancel the run; Bench.close still kills the children,
    # drops the database and removes the temp files.
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    interrupted: list[int] = []

    def interrupt(signum: int) -> None:
        interrupted.append(signum)
        task.cancel()

    handled = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, interrupt, sig)
            handled.append(sig)
    try:
        admin = "" if opts.scenario in OWN_DATABASE else _admin_url(settings)
        report = await run_scenarios(opts, admin)
    except asyncio.CancelledError:
        if not interrupted:
            raise
        sys.stderr.write(f"bench: interrupted by {signal.Signals(interrupted[0]).name}\n")
        return 130
    except BenchError as exc:
        sys.stderr.write(f"bench: error: {exc}\n")
        return 1
    except (OSError, asyncpg.PostgresError, TimeoutError, aiohttp.ClientError) as exc:
        msg = str(exc).strip().splitlines()
        sys.stderr.write(f"bench: error: {msg[0] if msg else type(exc).__name__}\n")
        return 1
    except Exception as exc:  # e.g. dispatcher.core.errors.OperationalError from embedded_url
        if type(exc).__module__.startswith("dispatcher"):
            sys.stderr.write(f"bench: error: {exc}\n")
            return 1
        raise
    finally:
        for sig in handled:
            loop.remove_signal_handler(sig)
    if opts.out is not None:
        opts.out.parent.mkdir(parents=True, exist_ok=True)
        opts.out.write_text(json.dumps(report, indent=2) + "\n")
    if opts.json:
        sys.stdout.write(json.dumps(report) + "\n")
    elif opts.scenario == "all":
        sys.stdout.write("\n\n".join(render(r) for r in report["reports"]) + "\n")
    else:
        sys.stdout.write(render(report) + "\n")
    sys.stdout.flush()
    return 0 if report["ok"] else 1


def cli(argv: list[str] | None = None) -> int:
    """`python -m benchmarks [...]` and `python -m benchmarks.harness [raw ...]`."""
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "raw":
        return rawclient.main(argv[1:])
    try:
        settings = Settings.from_env()
    except Exception as exc:
        sys.stderr.write(f"bench: error: {exc}\n")
        return 2
    try:
        return int(uvloop.run(main(argv, settings)))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(cli())
