"""The CLI's long-running commands: the worker, the admin API alone, the demo
and the benchmark harness.

Entry points like the rest of the CLI (dispatcher.cli.main.main parses their flags);
here they wire settings, the engine and the admin API together and stay in
the foreground until stopped.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import signal
import sys
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from dispatcher.cli.common import emit
from dispatcher.core.errors import BadInput, OperationalError
from dispatcher.db.embedded import resolve_database_url
from dispatcher.settings import Settings

if TYPE_CHECKING:
    from dispatcher.worker.engine import Engine


async def cmd_run(args: argparse.Namespace, settings: Settings) -> int:
    from dataclasses import replace

    from dispatcher import log
    from dispatcher.worker.engine import Engine

    if getattr(args, "processes", None) is not None:
        from dispatcher.cli.supervise import process_count, supervise

        n = process_count(args.processes)
        log.setup(settings.log_level, settings.sensitive_fields, settings.log_format)
        return await supervise(n, resolve_database_url(settings.database_url, settings.home))
    if args.max_in_flight is not None:
        settings = replace(settings, max_in_flight=args.max_in_flight)
    if args.batch_size is not None:
        settings = replace(settings, batch_size=args.batch_size)
    if (settings.max_in_flight is not None and settings.max_in_flight < 1) or (
        settings.batch_size < 1
    ):
        raise BadInput("--max-in-flight and --batch-size must be at least 1")
    log.setup(settings.log_level, settings.sensitive_fields, settings.log_format)
    from dispatcher.metrics import Metrics

    url = resolve_database_url(settings.database_url, settings.home)
    if args.http:
        check_admin_token(settings, args.http)
    await warn_refused_targets(settings, url)
    warn_dedup_window(settings)
    metrics = Metrics()
    engine = Engine(settings, url, metrics=metrics)
    loop = asyncio.get_running_loop()
    stopper = _Stopper(engine, settings.grace_s)
    loop.add_signal_handler(signal.SIGTERM, stopper.terminate)
    loop.add_signal_handler(signal.SIGINT, stopper.interrupt)
    # Long-lived start-up objects (modules, the loop) never become garbage;
    # freezing them and raising the young-generation threshold takes the
    # collector off the hot path (it cost ~20% of a busy process).
    _raise_file_limit()
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 50, 100)
    admin = None
    if args.http:
        from dispatcher.web.admin import start_admin

        admin = await start_admin(args.http, settings, url, metrics)
    bound = None if admin is None else _address(admin)
    try:
        await engine.run(drain=args.drain)
    finally:
        if admin is not None:
            await admin.cleanup()
    st = engine.stats
    emit(
        args,
        # At exit, not at start: one document, and the one a script wants
        # after `run --drain` (what was done); where --http listened is on
        # stderr at start too.
        {
            "worker": engine.worker,
            "stopped_by": stopper.by or ("drain" if args.drain else "stop"),
            "http": bound,
            **{k: v for k, v in asdict(st).items() if k != "breaker_transitions"},
            "breaker_transitions": len(st.breaker_transitions),
        },
        lambda: None,
    )
    return 0


class _Stopper:
    """Ctrl-C as a person expects it: the first says at once what the
    worker waits for and for how long; a second stops now (requests on the
    wire are cut off, their rows released, or back when their lease ends if
    the database is gone). SIGTERM, from a supervisor that sends SIGKILL
    after its own grace period, keeps the grace period and says nothing."""

    def __init__(self, engine: Engine, grace_s: float) -> None:
        self._engine = engine
        self._grace_s = grace_s
        self.by: str | None = None

    def terminate(self) -> None:
        self.by = self.by or "SIGTERM"
        self._engine.stop()

    def interrupt(self) -> None:
        n = self._engine.in_flight
        if self.by is None or self.by == "SIGTERM":
            self.by = "SIGINT"
            self._engine.stop()
            waits = (
                f"waiting up to {self._grace_s:g} s for {n} delivery(ies) in flight; "
                "Ctrl-C again to stop now"
                if n
                else "nothing in flight, writing the last outcomes"
            )
            sys.stderr.write(f"dispatcher: stopping: {waits}\n")
            return
        self._engine.stop(now=True)
        sys.stderr.write(
            f"dispatcher: stopping now: {n} delivery(ies) cut off, released to be sent "
            "again (or back when their lease ends)\n"
        )


def _address(runner: Any) -> str:
    host, port = runner.addresses[0][:2]
    return f"{host}:{port}"


def check_admin_token(settings: Settings, bind: str) -> None:
    """A short admin token: a warning on loopback, a refusal (exit 2)
    on any other address unless DISPATCHER_ALLOW_WEAK_ADMIN_TOKEN=1."""
    from dispatcher.ops.preflight import admin_token_problem
    from dispatcher.web.admin import parse_bind

    host, _ = parse_bind(bind)
    words, refuse = admin_token_problem(settings.admin_token, host, settings.allow_weak_admin_token)
    if refuse:
        raise BadInput(words)
    if words:
        sys.stderr.write(f"dispatcher: warning: {words}\n")


def warn_dedup_window(settings: Settings) -> None:
    """A retention of final rows shorter than the dedup window cuts the
    window to it (Retention.dedup_window): the rows that make a second
    enqueue of the same event id a no-op are gone sooner."""
    r, window = settings.retention, settings.dedup_window_s
    short = [
        name for name, s in (("DELIVERED", r.delivered_s), ("DEAD", r.dead_s),
                             ("CANCELLED", r.cancelled_s)) if 0 < s < window
    ]  # fmt: skip
    if short:
        names = ", ".join(f"DISPATCHER_RETENTION_{n}_S" for n in short)
        sys.stderr.write(
            f"dispatcher: warning: {names} shorter than DISPATCHER_DEDUP_WINDOW_S "
            f"({window:g} s): the dedup window is cut to {r.dedup_window(window):g} s; an event"
            " id enqueued again after that is delivered again\n"
        )


async def warn_refused_targets(settings: Settings, url: str) -> None:
    """One line per enabled endpoint the SSRF guard will refuse (the first
    few, then a count): at start, not as a dead letter after the retries."""
    from dispatcher import db
    from dispatcher.core.refusals import refusal_warning
    from dispatcher.ops.preflight import refused_targets

    conn = await db.connect(url)
    try:
        await db.require_schema(conn)
        refused = await refused_targets(conn, settings.target_policy())
    finally:
        await conn.close()
    for r in refused[:SHOWN_REFUSED]:
        # The words a running worker uses for one added later (worker/gate.py).
        sys.stderr.write(f"dispatcher: warning: {refusal_warning(r.endpoint_id, r.host, r.name)}\n")
    if len(refused) > SHOWN_REFUSED:
        sys.stderr.write(
            f"dispatcher: warning: and {len(refused) - SHOWN_REFUSED} more endpoint(s) the "
            "SSRF guard refuses (DISPATCHER_ALLOW_PRIVATE_TARGETS=1 allows private targets)\n"
        )


SHOWN_REFUSED = 5


def _raise_file_limit() -> None:
    """One socket per request in flight: lift the soft descriptor limit to the hard one."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


async def cmd_serve(args: argparse.Namespace, settings: Settings) -> int:
    from dispatcher.web.admin import start_admin

    check_admin_token(settings, args.http)
    url = resolve_database_url(settings.database_url, settings.home)
    stop = asyncio.Event()
    by: list[str] = []

    def stopped(sig: signal.Signals) -> None:
        by.append(sig.name)
        stop.set()

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopped, sig)
    # After the handlers: a signal right after "admin API on …" is a stop.
    runner = await start_admin(args.http, settings, url)
    bound = _address(runner)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
    # As `run --json`: one document, at exit.
    emit(args, {"http": bound, "stopped_by": by[0] if by else "stop"}, lambda: None)
    return 0


async def cmd_demo(args: argparse.Namespace, settings: Settings) -> int:
    from dispatcher.cli.demo import run_demo

    check_admin_token(settings, args.http)
    code: int = await run_demo(
        settings,
        events=args.events,
        http=args.http,
        linger_s=args.linger_s,
        keep=args.keep,
        database=args.database,
    )
    return code


async def cmd_bench(args: argparse.Namespace, settings: Settings) -> int:
    """The harness lives in the checkout, not in the installed package:
    `python -m benchmarks` from the checkout's root, in a process of its own."""
    import subprocess
    from pathlib import Path

    if not (Path.cwd() / "benchmarks" / "harness.py").is_file():
        raise OperationalError(
            "the benchmark harness lives in the repository's benchmarks/ folder: "
            "run `dispatcher bench` from a checkout"
        )
    return subprocess.run([sys.executable, "-m", "benchmarks", *args.bench_args]).returncode
