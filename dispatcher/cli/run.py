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

from dispatcher.core.errors import BadInput, OperationalError
from dispatcher.db.embedded import resolve_database_url
from dispatcher.settings import Settings


async def cmd_run(args: argparse.Namespace, settings: Settings) -> int:
    from dataclasses import replace

    from dispatcher import log
    from dispatcher.worker.engine import Engine

    if getattr(args, "processes", None) is not None:
        from dispatcher.cli.supervise import process_count, supervise

        n = process_count(args.processes)
        log.setup(settings.log_level, settings.sensitive_fields)
        return await supervise(n, resolve_database_url(settings.database_url, settings.home))
    if args.max_in_flight is not None:
        settings = replace(settings, max_in_flight=args.max_in_flight)
    if args.batch_size is not None:
        settings = replace(settings, batch_size=args.batch_size)
    if (settings.max_in_flight is not None and settings.max_in_flight < 1) or (
        settings.batch_size < 1
    ):
        raise BadInput("--max-in-flight and --batch-size must be at least 1")
    log.setup(settings.log_level, settings.sensitive_fields)
    from dispatcher.metrics import Metrics

    url = resolve_database_url(settings.database_url, settings.home)
    metrics = Metrics()
    engine = Engine(settings, url, metrics=metrics)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, engine.stop)
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
    try:
        await engine.run(drain=args.drain)
    finally:
        if admin is not None:
            await admin.cleanup()
    return 0


def _raise_file_limit() -> None:
    """One socket per request in flight: lift the soft descriptor limit to the hard one."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


async def cmd_serve(args: argparse.Namespace, settings: Settings) -> int:
    from dispatcher.web.admin import start_admin

    url = resolve_database_url(settings.database_url, settings.home)
    runner = await start_admin(args.http, settings, url)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
    return 0


async def cmd_demo(args: argparse.Namespace, settings: Settings) -> int:
    from dispatcher.cli.demo import run_demo

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
