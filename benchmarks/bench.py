"""One scenario run and what it is made of: the options, a temp dir, the
child processes, the receivers, the bench database, the enqueue step.

A scenario body is written as `@scenario async def run_x(bench, opts)`;
Bench.close, which the decorator always calls, kills every child, drops the
database and removes the temp dir, however the body ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg

from dispatcher.db.embedded import with_database

from .database import add_endpoints, create_database, drop_database, redact
from .errors import BenchError
from .meters import machine_info, settle
from .output import progress
from .payloads import write_events
from .processes import Children, dispatcher_argv
from .receiver_control import Receiver

TARGET_PER_MIN = 150_000  # issue 2's throughput target, judged by fast, slow200 and many
DEFAULT_DB = "dispatcher_bench"


@dataclass
class Options:
    """The parsed command line (harness.parse_options)."""

    scenario: str = "fast"
    timeout_s: float = 600.0
    db_name: str = DEFAULT_DB
    json: bool = False
    smoke: bool = False
    out: Path | None = None
    batch_size: int | None = None
    raw_passes: int = 3
    extra_env: dict[str, str] = field(default_factory=dict)
    # Sizes given on the command line (--events, --endpoints, ...): each
    # scenario sizes itself from these when given, from its own defaults
    # otherwise (Bench.size).
    given: dict[str, Any] = field(default_factory=dict)


def run_argv(opts: Options, max_in_flight: int | None, *, drain: bool = True) -> list[str]:
    """`dispatcher run` arguments: [--drain] [--max-in-flight N] [--batch-size B]
    (no --max-in-flight: the worker sizes its window itself)."""
    argv = ["run", *(["--drain"] if drain else [])]
    if max_in_flight is not None:
        argv += ["--max-in-flight", str(max_in_flight)]
    if opts.batch_size:
        argv += ["--batch-size", str(opts.batch_size)]
    return argv


@dataclass
class EndpointDef:
    """An endpoint a scenario creates: a path on one of its receivers."""

    path: str
    receiver: Receiver
    max_in_flight: int | None = None
    rate_per_s: float | None = None
    timeout_ms: int | None = None
    settings: dict[str, Any] = field(default_factory=dict)  # any other EndpointSpec fields
    app: str | None = None  # its application (None: the default one)
    id: int = 0
    secret: str = ""

    @property
    def url(self) -> str:
        return self.receiver.url_for(self.path)

    def spec(self) -> dict[str, Any]:
        """EndpointSpec fields: the URL and whatever the scenario set."""
        fields: dict[str, Any] = {"url": self.url}
        for name in ("max_in_flight", "rate_per_s", "timeout_ms"):
            if getattr(self, name) is not None:
                fields[name] = getattr(self, name)
        return fields | self.settings


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
            "database": redact(self.bench_url),
            "machine": machine_info(),
            "smoke": self.opts.smoke,
        }
        self.problems: list[str] = []

    def size(self, name: str, default: int, smoke: int) -> int:
        v = self.opts.given.get(name)
        if v is not None:
            return int(v)
        return smoke if self.opts.smoke else default

    async def settle(self) -> float:
        """Waits (bounded) for a nearly idle machine before a measurement;
        not in a smoke run, which measures nothing and shares the machine
        with a test suite (every wait would last its whole 20 s bound)."""
        return 0.0 if self.opts.smoke else await settle()

    def run_limit_s(self) -> float:
        """How long dispatcher processes may run: a run that does not finish is
        killed but still measured and reported, so some of the overall time is
        kept back for that and for cleaning up."""
        reserve = min(60.0, self.opts.timeout_s * 0.1)
        return max(self.children.remaining() - reserve, 1.0)

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
        await self.children.run(dispatcher_argv("migrate", "--json"), name="migrate", timeout_s=60)

    async def drop_db(self) -> None:
        if self.db_created:
            await drop_database(self.admin_url, self.opts.db_name)
            self.db_created = False

    async def add_endpoints(self, defs: Sequence[EndpointDef]) -> None:
        specs = [d.spec() for d in defs]
        created = await add_endpoints(self.bench_url, self.env, specs, [d.app for d in defs])
        for d, (endpoint_id, secret) in zip(defs, created, strict=True):
            d.id, d.secret = endpoint_id, secret

    async def enqueue(
        self, jobs: Sequence[tuple[EndpointDef, int]], *, addressed: bool = True, keys: int = 0
    ) -> dict[str, Any]:
        """Writes `count` events per endpoint (interleaved) as JSONL and times
        `dispatcher enqueue --file`. Addressed events name their endpoint;
        the others go to every endpoint subscribed to their type."""
        path = self.workdir / f"events-{len(jobs)}.jsonl"
        total = write_events(
            path,
            [(ep.id if addressed else None, n) for ep, n in jobs],
            "bench." + self.opts.scenario,
            keys=keys,
        )
        # Quiet machine first; not between enqueue and run, where the wait
        # would count in every event's created->delivered lag.
        settled = await self.settle()
        progress(f"enqueue: {total:,} events ({path.stat().st_size / 1e6:.1f} MB JSONL)")
        res = await self.children.run(
            dispatcher_argv("enqueue", "--file", str(path), "--json"), name="enqueue"
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
            "peak_rss_mb": round(res.maxrss_mb, 1),
            "settle_s": settled,
        }

    def finish(self, table: list[list[str]], verdicts: list[str]) -> dict[str, Any]:
        """The report, with the table `output.render` prints."""
        r = self.report
        r["table"] = table
        r["verdicts"] = verdicts
        r["problems"] = self.problems
        r["ok"] = not self.problems
        r["total_s"] = round(time.monotonic() - self.started, 1)
        return r

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


Runner = Callable[[Options, str], Awaitable[dict[str, Any]]]


def scenario(body: Callable[[Bench, Options], Awaitable[dict[str, Any]]]) -> Runner:
    """Makes a runner of a scenario body: one Bench, closed however it ends."""

    @functools.wraps(body)
    async def run(opts: Options, admin_url: str) -> dict[str, Any]:
        bench = Bench(opts, admin_url)
        try:
            return await body(bench, opts)
        finally:
            await bench.close()

    return run
