"""The benchmark harness: `dispatcher bench [SCENARIO] [options]` or `python -m benchmarks`.

Scenarios: fast (below, the default), slow200, many, noisy, two, wake (in
benchmarks/scenarios.py), and `all`, which runs each in turn.

Scenario "fast" (the default), everything in one run against one receiver:

1. start `benchmarks.receiver` on a free 127.0.0.1 port;
2. create a fresh database (`dispatcher_bench`, dropped first if it exists) on
   DATABASE_URL's server, or on the embedded server when DATABASE_URL is unset;
3. `dispatcher migrate`, `dispatcher endpoint add` (max-in-flight 256);
4. write N events as JSONL and time `dispatcher enqueue --file` (enqueue rate);
5. time `dispatcher run --drain --max-in-flight M`: wall time, CPU seconds and
   peak RSS of that process (from wait4's rusage), machine CPU meanwhile;
6. from the database: delivered, lost, end-to-end lag p50/p99
   (delivered_at - created_at); from the receiver: POSTs and duplicates;
7. the raw ceiling: a bare aiohttp client in its own process
   (`python -m benchmarks.harness raw …`) with the same concurrency, body kind
   and header set, against the same receiver;
8. print a table (or one JSON document with --json), clean everything up.

The exit status is 0 when the run is correct (nothing lost, no duplicates,
every child exited 0), 1 otherwise or on an operational failure, 2 for bad
arguments. Missing the throughput target does not fail the run.

Progress goes to stderr. Every wait is bounded by --timeout-s (default 600).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import dataclasses
import gc
import hashlib
import hmac
import json
import os
import platform
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import asyncpg

from dispatcher.embedded import with_database

TARGET_PER_MIN = 150_000
DEFAULT_DB = "dispatcher_bench"
EVENT_TYPE = "bench.fast"
REPO_ROOT = Path(__file__).resolve().parent.parent


class BenchError(Exception):
    """An operational failure: reported as one line, exit 1."""


class UsageError(Exception):
    """Bad arguments: reported as one line, exit 2."""


# ------------------------------------------------------------ payloads


_OFFERS = [1042, 1187, 2210, 3301, 4478, 5120]
_STATUSES = ["approved", "approved", "approved", "pending", "rejected"]
_CURRENCIES = ["USD", "EUR", "GBP"]


def postback_payload(rng: random.Random, n: int) -> dict[str, Any]:
    """A small, realistic affiliate postback (~350 bytes of JSON)."""
    ts = 1_796_000_000 + n
    return {
        "type": "conversion",
        "conversion_id": f"conv_{n:010d}",
        "click_id": uuid.UUID(int=rng.getrandbits(128)).hex,
        "offer_id": rng.choice(_OFFERS),
        "affiliate_id": rng.randrange(100, 9999),
        "sub_id": f"sub-{rng.randrange(1, 50)}",
        "status": rng.choice(_STATUSES),
        "payout": {
            "amount": f"{rng.randrange(50, 5000) / 100:.2f}",
            "currency": rng.choice(_CURRENCIES),
        },
        "revenue": {"amount": f"{rng.randrange(100, 9000) / 100:.2f}", "currency": "USD"},
        "occurred_at": datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z"),
        "country": rng.choice(["US", "DE", "GB", "FR", "BR", "IN"]),
        "device": rng.choice(["mobile", "desktop", "tablet"]),
    }


def write_events(path: Path, n: int, seed: int = 7) -> int:
    """Writes n JSONL events; returns the file size in bytes."""
    rng = random.Random(seed)
    with path.open("w", encoding="utf-8") as f:
        for i in range(n):
            line = {"event_type": EVENT_TYPE, "payload": postback_payload(rng, i)}
            f.write(json.dumps(line, separators=(",", ":")))
            f.write("\n")
    return path.stat().st_size


# ------------------------------------------------------------ output helpers


_tty = sys.stderr.isatty()


def progress(msg: str, *, transient: bool = False) -> None:
    """One progress line on stderr (overwritten in place on a terminal)."""
    stamp = time.strftime("%H:%M:%S")
    clear = "\r\x1b[K" if _tty else ""
    end = "" if _tty and transient else "\n"
    sys.stderr.write(f"{clear}[bench {stamp}] {msg}{end}")
    sys.stderr.flush()


def rate_since(last: dict[str, float], count: int, now: float) -> float:
    """Per second since the count and time in `last`, which then hold these."""
    rate = (count - last["count"]) / max(now - last["t"], 1e-6)
    last.update(count=count, t=now)
    return rate


def _fmt_int(v: float | None) -> str:
    return "-" if v is None else f"{round(v):,}"


def _fmt(v: float | None, digits: int = 1) -> str:
    return "-" if v is None else f"{v:,.{digits}f}"


# ------------------------------------------------------------ child processes


def _set_pdeathsig() -> None:  # pragma: no cover - runs in the child
    """Children die with the harness (Linux), so nothing outlives a crash."""
    with contextlib.suppress(Exception):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@dataclass
class ChildResult:
    returncode: int
    wall_s: float
    cpu_s: float  # user + system of the child (and its waited-for children)
    maxrss_mb: float
    stdout: str
    stderr: str
    timed_out: bool = False


class Children:
    """Starts and reaps child processes, bounded by the overall deadline."""

    def __init__(self, deadline: float, workdir: Path, env: dict[str, str]) -> None:
        self.deadline = deadline
        self.workdir = workdir
        self.env = env
        self.live: dict[int, subprocess.Popen[bytes]] = {}
        self._seq = 0

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def spawn(
        self, argv: list[str], *, name: str, stdout_pipe: bool = False
    ) -> tuple[subprocess.Popen[bytes], Path, Path]:
        """Our own modules run from the checkout; everything else from workdir."""
        self._seq += 1
        out_path = self.workdir / f"{self._seq:02d}-{name}.out"
        err_path = self.workdir / f"{self._seq:02d}-{name}.err"
        with out_path.open("wb") as out_f, err_path.open("wb") as err_f:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE if stdout_pipe else out_f,
                stderr=err_f,
                env=self.env,
                cwd=REPO_ROOT if "benchmarks" in " ".join(argv[1:3]) else self.workdir,
                preexec_fn=_set_pdeathsig if sys.platform == "linux" else None,
            )
        self.live[proc.pid] = proc
        return proc, out_path, err_path

    async def run(
        self,
        argv: list[str],
        *,
        name: str,
        timeout_s: float | None = None,
        on_tick: Callable[[], Any] | None = None,
        check: bool = True,
        timeout_is_error: bool = True,
    ) -> ChildResult:
        """Runs a child to completion; exact CPU and peak RSS come from wait4.

        On timeout the child is killed; that raises BenchError unless
        timeout_is_error is False, when the result says timed_out instead."""
        limit = self.remaining() if timeout_s is None else min(timeout_s, self.remaining())
        if limit <= 0:
            raise BenchError(f"overall timeout reached before {name}")
        t0 = time.perf_counter()
        proc, out_path, err_path = self.spawn(argv, name=name)
        loop = asyncio.get_running_loop()
        waiter = loop.run_in_executor(None, os.wait4, proc.pid, 0)
        timed_out = False
        try:
            end = time.monotonic() + limit
            while True:
                done, _ = await asyncio.wait({waiter}, timeout=1.0)
                if done:
                    break
                if on_tick is not None:
                    await on_tick()
                if time.monotonic() > end:
                    self.kill(proc)
                    done, _ = await asyncio.wait({waiter}, timeout=10)
                    if timeout_is_error or not done:
                        raise BenchError(
                            f"{name} did not finish within {limit:.0f} s (bounded by --timeout-s)"
                        )
                    timed_out = True
                    break
            _pid, status, usage = waiter.result()
        except BaseException:
            if proc.pid in self.live:
                self.kill(proc)
                with contextlib.suppress(BaseException):
                    await asyncio.wait({waiter}, timeout=10)
            raise
        finally:
            self.live.pop(proc.pid, None)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        result = ChildResult(
            returncode=proc.returncode,
            wall_s=wall,
            cpu_s=usage.ru_utime + usage.ru_stime,
            maxrss_mb=usage.ru_maxrss / 1024,  # KiB on Linux
            stdout=out_path.read_text(errors="replace"),
            stderr=err_path.read_text(errors="replace"),
            timed_out=timed_out,
        )
        if check and result.returncode != 0:
            raise BenchError(f"{name} exited {result.returncode}: {_last_line(result.stderr)}")
        return result

    def kill(self, proc: subprocess.Popen[bytes]) -> None:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()

    async def stop(self, proc: subprocess.Popen[bytes], grace_s: float = 5.0) -> None:
        """SIGTERM, then SIGKILL after grace_s; reaps it."""
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
            loop = asyncio.get_running_loop()
            try:
                await asyncio.wait_for(loop.run_in_executor(None, proc.wait), grace_s)
            except TimeoutError:
                self.kill(proc)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(loop.run_in_executor(None, proc.wait), 5)
        self.live.pop(proc.pid, None)

    async def stop_all(self) -> None:
        for proc in list(self.live.values()):
            await self.stop(proc, grace_s=2.0)


def _engine_stats(stderr: str) -> dict[str, Any] | None:
    """The counters of the engine's `engine_stopped` log line, if it wrote one."""
    for line in reversed(stderr.splitlines()):
        if '"engine_stopped"' in line:
            with contextlib.suppress(ValueError):
                doc = json.loads(line)
                return {k: v for k, v in doc.items() if k not in ("ts", "level", "event")}
    return None


def _last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:400] if lines else "(no output on stderr)"


# ------------------------------------------------------------ the receiver


class Receiver:
    def __init__(
        self,
        children: Children,
        latency_ms: float = 0.0,
        *,
        status: int = 200,
        hang: bool = False,
        record_arrivals: int = 0,
        name: str = "receiver",
    ) -> None:
        self.children = children
        self.latency_ms = latency_ms
        self.status = status
        self.hang = hang
        self.record_arrivals = record_arrivals
        self.name = name
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        argv = [sys.executable, "-m", "benchmarks.receiver", "--port", "0"]
        if self.latency_ms:
            argv += ["--latency-ms", str(self.latency_ms)]
        if self.status != 200:
            argv += ["--status", str(self.status)]
        if self.hang:
            argv += ["--hang"]
        if self.record_arrivals:
            argv += ["--record-arrivals", str(self.record_arrivals)]
        proc, _, err_path = self.children.spawn(argv, name=self.name, stdout_pipe=True)
        self.proc = proc
        assert proc.stdout is not None
        loop = asyncio.get_running_loop()
        try:
            line = await asyncio.wait_for(loop.run_in_executor(None, proc.stdout.readline), 15)
        except TimeoutError:
            raise BenchError("the receiver did not become ready within 15 s") from None
        text = line.decode(errors="replace").strip()
        if not text.startswith("READY "):
            await self.children.stop(proc)
            raise BenchError(f"the receiver failed to start: {_last_line(err_path.read_text())}")
        self.port = int(text.split()[1])
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def url_for(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    async def stats(self, *, paths: bool = False) -> dict[str, Any]:
        assert self._session is not None
        query = "?paths=1" if paths else ""
        async with self._session.get(f"http://127.0.0.1:{self.port}/stats{query}") as resp:
            doc: dict[str, Any] = await resp.json()
            return doc

    async def arrivals(self) -> dict[str, float]:
        """First-arrival time.time() per webhook-id (with --record-arrivals)."""
        assert self._session is not None
        async with self._session.get(f"http://127.0.0.1:{self.port}/arrivals") as resp:
            doc: dict[str, float] = await resp.json()
            return doc

    def cpu_s(self) -> float | None:
        try:
            import psutil  # type: ignore[import-untyped]
        except ImportError:
            return None
        if self.proc is None:
            return None
        try:
            t = psutil.Process(self.proc.pid).cpu_times()
        except psutil.Error:
            return None
        return float(t.user + t.system)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
        if self.proc is not None:
            if self.proc.stdout is not None:
                self.proc.stdout.close()
            await self.children.stop(self.proc)
            self.proc = None


# ------------------------------------------------------------ the database


def _redact(url: str) -> str:
    parts = urlsplit(url)
    if parts.password:
        netloc = parts.netloc.replace(":" + parts.password + "@", ":***@")
        return urlunsplit(parts._replace(netloc=netloc))
    return url


async def create_database(admin_url: str, name: str) -> str:
    try:
        conn = await asyncpg.connect(admin_url, timeout=10)
    except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
        raise BenchError(f"cannot connect to {_redact(admin_url)}: {exc}") from None
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await conn.execute(f'CREATE DATABASE "{name}"')
        version = await conn.fetchval("SHOW server_version")
    finally:
        await conn.close()
    return str(version)


async def drop_database(admin_url: str, name: str) -> None:
    conn = await asyncpg.connect(admin_url, timeout=10)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


# The columns every scenario reads back; scenarios.py adds a few and a filter.
RESULT_COLUMNS = """count(*) AS rows,
       count(*) FILTER (WHERE status = 'delivered') AS delivered,
       coalesce(sum(attempt_count), 0) AS attempts,
       percentile_cont(0.5) WITHIN GROUP (
           ORDER BY extract(epoch FROM delivered_at - created_at) * 1000)
           FILTER (WHERE status = 'delivered') AS lag_p50_ms,
       percentile_cont(0.99) WITHIN GROUP (
           ORDER BY extract(epoch FROM delivered_at - created_at) * 1000)
           FILTER (WHERE status = 'delivered') AS lag_p99_ms,
       max(extract(epoch FROM delivered_at - created_at) * 1000)
           FILTER (WHERE status = 'delivered') AS lag_max_ms"""

RESULT_SQL = f"""
SELECT {RESULT_COLUMNS}
FROM webhook_queue
"""

HTTP_SQL = """
SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY response_ms) AS p50,
       percentile_cont(0.99) WITHIN GROUP (ORDER BY response_ms) AS p99,
       count(*) AS n
FROM endpoint_latency
"""


DB_COUNTERS = (
    "xact_commit",
    "xact_rollback",
    "tup_returned",
    "tup_fetched",
    "tup_inserted",
    "tup_updated",
    "tup_deleted",
    "blks_read",
    "blks_hit",
)


async def db_counters(admin_url: str, name: str) -> dict[str, int] | None:
    """The bench database's cumulative pg_stat_database counters, read from
    another database so that reading them does not count."""
    conn = await asyncpg.connect(admin_url, timeout=10)
    try:
        row = await conn.fetchrow(
            f"SELECT {', '.join(DB_COUNTERS)} FROM pg_stat_database WHERE datname = $1", name
        )
    finally:
        await conn.close()
    return None if row is None else {k: int(row[k] or 0) for k in DB_COUNTERS}


def http_percentiles(http: Any) -> dict[str, float | None]:
    """http_p50_ms / http_p99_ms from a row of HTTP_SQL."""
    return {f"http_{q}_ms": None if http[q] is None else float(http[q]) for q in ("p50", "p99")}


async def query_results(url: str) -> dict[str, Any]:
    conn = await asyncpg.connect(url, timeout=10)
    try:
        row = await conn.fetchrow(RESULT_SQL)
        http = await conn.fetchrow(HTTP_SQL)
        statuses = {r["status"]: r["n"] for r in await conn.fetch(
            "SELECT status, count(*) AS n FROM webhook_queue GROUP BY status ORDER BY status"
        )}  # fmt: skip
    finally:
        await conn.close()
    assert row is not None and http is not None
    out = {k: (float(v) if k.endswith("_ms") and v is not None else v) for k, v in row.items()}
    out.update(http_percentiles(http))
    out["latency_samples"] = http["n"]
    out["status_counts"] = statuses
    return out


# ------------------------------------------------------------ machine facts


def machine_info() -> dict[str, Any]:
    info: dict[str, Any] = {
        "nproc": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu_model"] = line.split(":", 1)[1].strip()
                break
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                info["mem_total_mb"] = round(int(line.split()[1]) / 1024)
                break
    with contextlib.suppress(OSError):
        info["loadavg_before"] = [round(x, 2) for x in os.getloadavg()]
    with contextlib.suppress(Exception):
        rev = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=REPO_ROOT, capture_output=True, text=True, timeout=5,
        )  # fmt: skip
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "dispatcher", "schema"],
            cwd=REPO_ROOT, capture_output=True, text=True, timeout=5,
        )  # fmt: skip
        if rev.returncode == 0:
            info["git_commit"] = rev.stdout.strip()
            info["dispatcher_dirty_files"] = [ln[3:] for ln in dirty.stdout.splitlines()]
    info["dispatcher_tree_sha256"] = _tree_hash(REPO_ROOT / "dispatcher", REPO_ROOT / "schema")
    return info


def _tree_hash(*roots: Path) -> str | None:
    """A hash of the code under test: tells whether two runs measured the same code."""
    h = hashlib.sha256()
    try:
        for root in roots:
            for f in sorted(root.rglob("*")):
                if f.is_file() and f.suffix in (".py", ".sql"):
                    h.update(str(f.relative_to(REPO_ROOT)).encode() + b"\0")
                    h.update(f.read_bytes())
    except OSError:
        return None
    return h.hexdigest()[:16]


def _cpu_busy() -> float | None:
    """Busy CPU seconds of the whole machine so far (all cores)."""
    try:
        import psutil  # type: ignore[import-untyped]
    except ImportError:
        return None
    t = psutil.cpu_times()
    return float(sum(t) - t.idle - getattr(t, "iowait", 0.0))


class PgCpu:
    """CPU seconds of the local PostgreSQL processes over a phase.

    Sampled (once a second and at both ends) per pid, so backends that exit
    during the phase count up to their last sample. `bench` is the share of
    backends connected to the bench database (their ps title names it).
    """

    def __init__(self, db_name: str) -> None:
        self.db_name = db_name
        self.base: dict[int, float] = {}
        self.last: dict[int, tuple[float, bool]] = {}
        self.available = True
        self._first = True

    def sample(self) -> None:
        try:
            import psutil  # type: ignore[import-untyped]
        except ImportError:
            self.available = False
            return
        for proc in psutil.process_iter(["name"]):
            if proc.info.get("name") != "postgres":
                continue
            try:
                t = proc.cpu_times()
                title = " ".join(proc.cmdline())
            except psutil.Error:
                continue
            cpu = float(t.user + t.system)
            if proc.pid not in self.base:
                self.base[proc.pid] = cpu if self._first else 0.0
            self.last[proc.pid] = (cpu, f" {self.db_name} " in f" {title} ")
        self._first = False

    def totals(self) -> tuple[float, float] | None:
        if not self.available or not self.last:
            return None
        total = bench = 0.0
        for pid, (cpu, is_bench) in self.last.items():
            used = max(cpu - self.base.get(pid, 0.0), 0.0)
            total += used
            if is_bench:
                bench += used
        return total, bench


async def settle(max_wait_s: float = 20.0, idle_below: float = 0.15) -> float:
    """Waits (bounded) until the machine is nearly idle, e.g. after autovacuum
    or a checkpoint that a previous phase set off; returns the seconds waited."""
    t0 = time.monotonic()
    ncpu = os.cpu_count() or 1
    prev = _cpu_busy()
    if prev is None:
        return 0.0
    while time.monotonic() - t0 < max_wait_s:
        await asyncio.sleep(0.5)
        now = _cpu_busy()
        assert now is not None
        if (now - prev) / (0.5 * ncpu) < idle_below:
            break
        prev = now
    return round(time.monotonic() - t0, 1)


# ------------------------------------------------------------ the scenario


@dataclass
class Options:
    scenario: str = "fast"
    events: int = 100_000
    max_in_flight: int = 256
    endpoint_max_in_flight: int = 256
    batch_size: int | None = None
    raw_requests: int = 50_000
    raw_passes: int = 3
    latency_ms: float = 0.0
    timeout_s: float = 600.0
    db_name: str = DEFAULT_DB
    json: bool = False
    smoke: bool = False
    out: Path | None = None
    extra_env: dict[str, str] = field(default_factory=dict)
    # The other scenarios (benchmarks/scenarios.py) size themselves from
    # these when given, from their own defaults otherwise.
    endpoints: int | None = None
    samples: int | None = None
    given: dict[str, Any] = field(default_factory=dict)


def run_argv(opts: Options, max_in_flight: int, *, drain: bool = True) -> list[str]:
    """`dispatcher run` arguments: [--drain] --max-in-flight N [--batch-size B]."""
    argv = ["run", *(["--drain"] if drain else []), "--max-in-flight", str(max_in_flight)]
    if opts.batch_size:
        argv += ["--batch-size", str(opts.batch_size)]
    return argv


def _dispatcher(*args: str) -> list[str]:
    # The installed console script, run outside the checkout, so that the
    # installed package is what runs (the checkout's dispatcher/ lacks schema/).
    script = Path(sys.executable).with_name("dispatcher")
    if script.exists():
        return [str(script), *args]
    return [sys.executable, "-m", "dispatcher", *args]


async def run_fast(opts: Options, admin_url: str) -> dict[str, Any]:
    started = time.monotonic()
    deadline = started + opts.timeout_s
    workdir = Path(tempfile.mkdtemp(prefix="dispatcher-bench-"))
    bench_url = with_database(admin_url, opts.db_name)
    env = dict(os.environ)
    env.update(
        DATABASE_URL=bench_url,
        DISPATCHER_ALLOW_PRIVATE_TARGETS="1",
    )
    env.update(opts.extra_env)
    children = Children(deadline, workdir, env)
    receiver = Receiver(children, opts.latency_ms)
    report: dict[str, Any] = {
        "scenario": opts.scenario,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "events": opts.events,
        "max_in_flight": opts.max_in_flight,
        "endpoint_max_in_flight": opts.endpoint_max_in_flight,
        "batch_size": opts.batch_size,
        "receiver_latency_ms": opts.latency_ms,
        "database": _redact(bench_url),
        "machine": machine_info(),
    }
    db_created = False
    try:
        progress(f"receiver: starting (latency {opts.latency_ms:g} ms)")
        await receiver.start()
        progress(f"database: creating {opts.db_name}")
        report["postgres_version"] = await create_database(admin_url, opts.db_name)
        db_created = True
        await children.run(_dispatcher("migrate", "--json"), name="migrate", timeout_s=60)
        add = await children.run(
            _dispatcher(
                "endpoint", "add", "--url", receiver.url,
                "--max-in-flight", str(opts.endpoint_max_in_flight), "--json",
            ),
            name="endpoint-add",
            timeout_s=60,
        )  # fmt: skip
        endpoint = json.loads(add.stdout)
        secret = endpoint["secret"]

        # -------------------------------------------------- enqueue
        events_file = workdir / "events.jsonl"
        size = write_events(events_file, opts.events)
        # Quiet machine first; not between enqueue and run, where the wait
        # would count in every event's created->delivered lag.
        settled = {"enqueue": await settle()}
        progress(f"enqueue: {opts.events:,} events ({size / 1e6:.1f} MB JSONL)")
        enq = await children.run(
            _dispatcher("enqueue", "--file", str(events_file), "--json"), name="enqueue"
        )
        enq_doc = json.loads(enq.stdout)
        report["enqueue"] = {
            "seconds": round(enq.wall_s, 3),
            "events_per_s": round(opts.events / enq.wall_s, 1),
            "deliveries": enq_doc.get("deliveries"),
            "cpu_s": round(enq.cpu_s, 3),
            "peak_rss_mb": round(enq.maxrss_mb, 1),
        }
        if enq_doc.get("deliveries") != opts.events:
            raise BenchError(
                f"enqueue created {enq_doc.get('deliveries')} deliveries, expected {opts.events}"
            )
        progress(f"enqueue: {opts.events / enq.wall_s:,.0f} events/s ({enq.wall_s:.2f} s)")

        # -------------------------------------------------- dispatcher run
        before = await receiver.stats()
        counters0 = await db_counters(admin_url, opts.db_name)
        rcv_cpu0 = receiver.cpu_s()
        busy0 = _cpu_busy()
        pg_cpu = PgCpu(opts.db_name)
        pg_cpu.sample()
        run_t0 = time.perf_counter()
        last = {"count": before["count"], "t": run_t0}

        async def tick() -> None:
            pg_cpu.sample()
            with contextlib.suppress(aiohttp.ClientError, TimeoutError, OSError):
                s = await receiver.stats()
                now = time.perf_counter()
                done = s["count"] - before["count"]
                rate = rate_since(last, s["count"], now)
                progress(
                    f"run: delivered {done:,}/{opts.events:,}  {rate:,.0f}/s  "
                    f"elapsed {now - run_t0:.0f} s",
                    transient=True,
                )

        argv = run_argv(opts, opts.max_in_flight)
        progress(f"run: dispatcher {' '.join(argv)}")
        # A run that does not drain in time is killed but still measured and
        # reported (what the receiver and the database saw is the story);
        # some time is kept back for that and for cleaning up.
        reserve = min(60.0, opts.timeout_s * 0.1)
        run = await children.run(
            _dispatcher(*argv),
            name="run",
            on_tick=tick,
            check=False,
            timeout_s=max(children.remaining() - reserve, 1.0),
            timeout_is_error=False,
        )
        busy1 = _cpu_busy()
        pg_cpu.sample()
        rcv_cpu1 = receiver.cpu_s()
        after = await receiver.stats()
        if run.timed_out:
            progress(f"run: did not drain; killed after {run.wall_s:.2f} s")
        else:
            progress(f"run: exited {run.returncode} after {run.wall_s:.2f} s")

        counters1 = await db_counters(admin_url, opts.db_name)
        db = await query_results(bench_url)
        # The database has served its purpose: dropping it now keeps its
        # autovacuum off the CPU while the raw ceiling is measured.
        await drop_database(admin_url, opts.db_name)
        db_created = False
        posts = after["count"] - before["count"]
        unique = after["unique_ids"] - before["unique_ids"]
        duplicates = after["duplicates"] - before["duplicates"]
        delivered = int(db["delivered"])
        window = None
        if after["first_ts"] is not None and after["last_ts"] is not None and posts > 1:
            window = after["last_ts"] - after["first_ts"]
        machine_busy = None if busy0 is None or busy1 is None else busy1 - busy0
        rcv_cpu = None if rcv_cpu0 is None or rcv_cpu1 is None else rcv_cpu1 - rcv_cpu0
        pg = pg_cpu.totals()
        foreign_cpu = None
        if machine_busy is not None and rcv_cpu is not None and pg is not None:
            foreign_cpu = max(machine_busy - run.cpu_s - rcv_cpu - pg[0], 0.0)
        per_k = 1000 / delivered if delivered else None

        def r3(v: float | None, k: float = 1.0) -> float | None:
            return None if v is None else round(v * k, 4)

        report["dispatcher"] = {
            "exit_code": run.returncode,
            "timed_out": run.timed_out,
            "wall_s": round(run.wall_s, 3),
            "deliveries_per_min": round(delivered / run.wall_s * 60, 1),
            "receiver_window_per_min": round(posts / window * 60, 1) if window else None,
            "delivered": delivered,
            "rows": db["rows"],
            "lost": opts.events - delivered,
            "status_counts": db["status_counts"],
            "attempts": db["attempts"],
            "receiver_posts": posts,
            "receiver_unique_ids": unique,
            "duplicates": duplicates,
            "lag_p50_ms": db["lag_p50_ms"],
            "lag_p99_ms": db["lag_p99_ms"],
            "lag_max_ms": db["lag_max_ms"],
            "http_p50_ms": db["http_p50_ms"],
            "http_p99_ms": db["http_p99_ms"],
            "cpu_s": round(run.cpu_s, 3),
            "cpu_s_per_1000": round(run.cpu_s * per_k, 4) if per_k else None,
            "peak_rss_mb": round(run.maxrss_mb, 1),
            "receiver_cpu_s": r3(rcv_cpu),
            # PostgreSQL: all local server processes; bench_db: the backends
            # connected to the bench database (the dispatcher's own load).
            "postgres_cpu_s": r3(pg[0] if pg else None),
            "postgres_cpu_s_per_1000": r3(pg[0] if pg and per_k else None, per_k or 0),
            "postgres_bench_db_cpu_s": r3(pg[1] if pg else None),
            "machine_busy_cpu_s": r3(machine_busy),
            # Busy CPU none of the above accounts for: the kernel's loopback
            # networking, the harness, and any other load on the machine.
            "unattributed_cpu_s": r3(foreign_cpu),
            "engine": _engine_stats(run.stderr),
            # Statements the run cost the database (pg_stat_database deltas):
            # xact_commit counts one per autocommitted statement or transaction.
            "db_counters": (
                {k: counters1[k] - counters0[k] for k in DB_COUNTERS}
                if counters0 and counters1
                else None
            ),
            "db_xacts_per_1000": (
                round((counters1["xact_commit"] - counters0["xact_commit"]) * per_k, 1)
                if counters0 and counters1 and per_k
                else None
            ),
            "stderr_tail": _last_line(run.stderr) if run.returncode else None,
        }
        progress(
            f"run: {delivered:,} delivered, {report['dispatcher']['deliveries_per_min']:,.0f}/min, "
            f"lost {opts.events - delivered}, duplicates {duplicates}"
        )

        # -------------------------------------------------- raw ceiling
        passes = []
        for i in range(opts.raw_passes):
            if children.remaining() < 30 and not opts.smoke:
                progress("raw: skipped, the overall timeout is near")
                break
            progress(
                f"raw: pass {i + 1}/{opts.raw_passes}, {opts.raw_requests:,} requests, "
                f"concurrency {opts.max_in_flight}"
            )
            settled[f"raw{i + 1}"] = await settle()
            r0 = await receiver.stats()
            raw = await children.run(
                [
                    sys.executable, "-m", "benchmarks.harness", "raw",
                    "--url", receiver.url, "--requests", str(opts.raw_requests),
                    "--concurrency", str(opts.max_in_flight), "--secret", secret,
                    "--id-prefix", f"raw{i}_",
                ],
                name=f"raw-{i + 1}",
            )  # fmt: skip
            r1 = await receiver.stats()
            doc = json.loads(raw.stdout)
            doc["cpu_s"] = round(raw.cpu_s, 3)
            doc["cpu_s_per_1000"] = round(raw.cpu_s * 1000 / max(doc["ok"], 1), 4)
            doc["peak_rss_mb"] = round(raw.maxrss_mb, 1)
            doc["receiver_posts"] = r1["count"] - r0["count"]
            passes.append(doc)
            progress(f"raw: {doc['per_min']:,.0f}/min ({doc['errors']} errors)")
        raw_median = statistics.median(p["per_min"] for p in passes) if passes else None
        report["raw"] = {
            "requests": opts.raw_requests,
            "concurrency": opts.max_in_flight,
            "passes": passes,
            "per_min": raw_median,
            "best_per_min": max((p["per_min"] for p in passes), default=None),
            "cpu_s_per_1000": (
                statistics.median(p["cpu_s_per_1000"] for p in passes) if passes else None
            ),
        }
        dpm = report["dispatcher"]["deliveries_per_min"]
        report["ratio_to_raw"] = round(dpm / raw_median, 4) if raw_median else None
        report["target_per_min"] = TARGET_PER_MIN
        # A smoke run is too short to say anything about throughput.
        report["meets_target"] = None if opts.smoke else dpm >= TARGET_PER_MIN
        problems = []
        if run.timed_out:
            problems.append(f"dispatcher run did not drain within {run.wall_s:.0f} s (killed)")
        elif run.returncode != 0:
            problems.append(f"dispatcher run exited {run.returncode}")
        if posts > opts.events:
            problems.append(f"receiver got {posts} POSTs for {opts.events} events")
        if opts.events - delivered:
            problems.append(f"{opts.events - delivered} events not delivered")
        if duplicates:
            problems.append(f"{duplicates} duplicate POSTs")
        if unique != delivered:
            problems.append(f"receiver saw {unique} distinct ids, database says {delivered}")
        if any(p["errors"] or p["receiver_posts"] != p["ok"] for p in passes):
            problems.append("raw client saw errors or a receiver count mismatch")
        report["settle_s"] = settled
        report["problems"] = problems
        report["ok"] = not problems
        report["total_s"] = round(time.monotonic() - started, 1)
        return report
    finally:
        progress("cleanup")
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(receiver.close(), 15)
        with contextlib.suppress(BaseException):
            await children.stop_all()
        if db_created:
            try:
                await asyncio.wait_for(drop_database(admin_url, opts.db_name), 30)
            except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
                progress(f"warning: could not drop {opts.db_name}: {exc}")
        shutil.rmtree(workdir, ignore_errors=True)


# ------------------------------------------------------------ report


def render(report: dict[str, Any]) -> str:
    d = report["dispatcher"]
    e = report["enqueue"]
    r = report["raw"]
    ratio = report["ratio_to_raw"]
    rows: list[tuple[str, str]] = [
        ("deliveries/min (dispatcher)", _fmt_int(d["deliveries_per_min"])),
        ("  wall time of run --drain", f"{d['wall_s']:.2f} s"),
        ("  receiver-window rate/min", _fmt_int(d["receiver_window_per_min"])),
        ("enqueue rate", f"{_fmt_int(e['events_per_s'])} events/s ({e['seconds']:.2f} s)"),
        (
            "raw ceiling/min (aiohttp)",
            f"{_fmt_int(r['per_min'])} (median of {len(r['passes'])} x {r['requests']:,})",
        ),
        ("ratio dispatcher/raw", "-" if ratio is None else f"{ratio:.2f}"),
        (
            "lag p50 / p99 (created->delivered)",
            f"{_fmt_int(d['lag_p50_ms'])} / {_fmt_int(d['lag_p99_ms'])} ms",
        ),
        ("HTTP p50 / p99 (as measured)", f"{_fmt(d['http_p50_ms'])} / {_fmt(d['http_p99_ms'])} ms"),
        ("dispatcher CPU s / 1,000", _fmt(d["cpu_s_per_1000"], 3)),
        ("raw client CPU s / 1,000", _fmt(r["cpu_s_per_1000"], 3)),
        ("PostgreSQL CPU s / 1,000", _fmt(d["postgres_cpu_s_per_1000"], 3)),
        ("unattributed CPU (kernel, other load)", f"{_fmt(d['unattributed_cpu_s'])} s during run"),
        ("DB transactions / 1,000", _fmt(d["db_xacts_per_1000"])),
        ("dispatcher peak RSS", f"{_fmt(d['peak_rss_mb'])} MB"),
        ("delivered", f"{d['delivered']:,} of {report['events']:,}"),
        ("lost", f"{d['lost']:,}"),
        ("duplicates", f"{d['duplicates']:,}"),
    ]
    width = max(len(k) for k, _ in rows)
    head = (
        f"dispatcher bench: scenario {report['scenario']}, {report['events']:,} events, "
        f"max-in-flight {report['max_in_flight']}, {report['machine'].get('nproc')} cores"
    )
    lines = [head, "-" * len(head)]
    lines += [f"{k.ljust(width)}  {v}" for k, v in rows]
    meets = report["meets_target"]
    verdict = "not judged (smoke run)" if meets is None else "meets" if meets else "BELOW"
    lines.append("")
    lines.append(f"target {TARGET_PER_MIN:,}/min: {verdict}")
    if report["problems"]:
        lines.append("PROBLEMS: " + "; ".join(report["problems"]))
    else:
        lines.append("correctness: ok (nothing lost, no duplicates)")
    return "\n".join(lines)


# ------------------------------------------------------------ arguments


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="dispatcher bench",
        description="Benchmark harness. Scenarios: " + ", ".join(SCENARIOS) + ", all.",
    )
    p.add_argument("scenario", nargs="?", default="fast", choices=[*SCENARIOS, "all"])
    p.add_argument("--events", type=int, default=None, help="deliveries (per scenario)")
    p.add_argument(
        "--max-in-flight", type=int, default=None, help="run --max-in-flight (fast: 256)"
    )
    p.add_argument("--endpoint-max-in-flight", type=int, default=None, help="(fast: 256)")
    p.add_argument("--endpoints", type=int, default=None, help="endpoints (slow200, many, noisy)")
    p.add_argument("--samples", type=int, default=None, help="wake: enqueues measured (200)")
    p.add_argument("--batch-size", type=int, default=None, help="run --batch-size (default)")
    p.add_argument("--raw-requests", type=int, default=None, help="min(events, 50000)")
    p.add_argument("--raw-passes", type=int, default=None, help="raw ceiling passes (3)")
    p.add_argument("--latency-ms", type=float, default=0.0, help="receiver response delay")
    p.add_argument("--timeout-s", type=float, default=600.0, help="overall bound (600)")
    p.add_argument("--db-name", default=None, help=f"bench database ({DEFAULT_DB})")
    p.add_argument("--smoke", action="store_true", help="300 events, one raw pass of 300")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.add_argument("--out", type=Path, default=None, help="also write the JSON report here")
    return p


def parse_options(argv: list[str]) -> Options:
    if argv and argv[0] == "--":
        argv = argv[1:]
    a = build_parser().parse_args(argv)
    given = {k: v for k, v in vars(a).items() if v is not None}
    max_in_flight = 256 if a.max_in_flight is None else a.max_in_flight
    endpoint_max_in_flight = 256 if a.endpoint_max_in_flight is None else a.endpoint_max_in_flight
    events = a.events if a.events is not None else (300 if a.smoke else 100_000)
    raw_requests = a.raw_requests if a.raw_requests is not None else min(events, 50_000)
    raw_passes = a.raw_passes if a.raw_passes is not None else (1 if a.smoke else 3)
    if a.smoke and a.raw_requests is None:
        raw_requests = 300
    db_name = a.db_name or (f"{DEFAULT_DB}_smoke_{os.getpid()}" if a.smoke else DEFAULT_DB)
    for name, v, lo in (
        ("--events", events, 1),
        ("--max-in-flight", max_in_flight, 1),
        ("--endpoint-max-in-flight", endpoint_max_in_flight, 1),
        ("--raw-requests", raw_requests, 1),
        ("--raw-passes", raw_passes, 0),
        ("--endpoints", 1 if a.endpoints is None else a.endpoints, 1),
        ("--samples", 1 if a.samples is None else a.samples, 1),
    ):
        if v < lo:
            raise UsageError(f"{name} must be at least {lo}")
    if events > 10_000_000:
        raise UsageError("--events must be at most 10,000,000")
    if a.endpoints is not None and a.endpoints > 10_000:
        raise UsageError("--endpoints must be at most 10,000")
    if a.samples is not None and a.samples > 100_000:
        raise UsageError("--samples must be at most 100,000")
    if a.batch_size is not None and a.batch_size < 1:
        raise UsageError("--batch-size must be at least 1")
    if not 0 < a.timeout_s <= 24 * 3600:
        raise UsageError("--timeout-s must be in (0, 86400]")
    if not 0 <= a.latency_ms <= 60_000:
        raise UsageError("--latency-ms must be 0..60000")
    if not db_name.replace("_", "").isalnum() or len(db_name) > 63:
        raise UsageError("--db-name must be letters, digits and underscores (max 63)")
    return Options(
        scenario=a.scenario,
        events=events,
        max_in_flight=max_in_flight,
        endpoint_max_in_flight=endpoint_max_in_flight,
        batch_size=a.batch_size,
        raw_requests=raw_requests,
        raw_passes=raw_passes,
        latency_ms=a.latency_ms,
        timeout_s=a.timeout_s,
        db_name=db_name,
        json=a.json,
        smoke=a.smoke,
        out=a.out,
        endpoints=a.endpoints,
        samples=a.samples,
        given=given,
    )


def _admin_url(settings: Any) -> str:
    url = getattr(settings, "database_url", None) or os.environ.get("DATABASE_URL")
    if url:
        return str(url)
    from dispatcher.embedded import embedded_url

    home = getattr(settings, "home", None) or Path(
        os.environ.get("DISPATCHER_HOME") or ".dispatcher"
    )
    progress(f"DATABASE_URL is unset: using the embedded PostgreSQL under {home}")
    return embedded_url(Path(home))


async def main(argv: list[str], settings: Any = None) -> int:
    """Entry point of `dispatcher bench ARGS…` and `python -m benchmarks ARGS…`."""
    try:
        opts = parse_options(list(argv))
    except UsageError as exc:
        sys.stderr.write(f"bench: error: {exc}\n")
        return 2
    # SIGTERM / SIGINT cancel the run; run_fast's cleanup still kills the
    # children, drops the database and removes the temp files.
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
        admin_url = _admin_url(settings)
        report = await run_scenarios(opts, admin_url)
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
    except Exception as exc:  # e.g. dispatcher.errors.OperationalError from embedded_url
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
        tables = [render_any(r) for r in report["reports"]]
        sys.stdout.write("\n\n".join(tables) + "\n")
    else:
        sys.stdout.write(render_any(report) + "\n")
    sys.stdout.flush()
    return 0 if report["ok"] else 1


SCENARIOS = ("fast", "slow200", "many", "noisy", "two", "wake")


async def run_scenarios(opts: Options, admin_url: str) -> dict[str, Any]:
    """One scenario's report, or for `all` one document holding each report
    (each scenario bounded by its own --timeout-s)."""
    from . import scenarios

    if opts.scenario != "all":
        if opts.scenario == "fast":
            return await run_fast(opts, admin_url)
        return await scenarios.RUNNERS[opts.scenario](opts, admin_url)
    reports = []
    for name in SCENARIOS:
        progress(f"=== scenario {name}")
        sub = dataclasses.replace(opts, scenario=name)
        try:
            if name == "fast":
                rep = await run_fast(sub, admin_url)
            else:
                rep = await scenarios.RUNNERS[name](sub, admin_url)
        except BenchError as exc:
            rep = {"scenario": name, "ok": False, "problems": [str(exc)], "error": str(exc)}
        reports.append(rep)
    return {
        "scenario": "all",
        "reports": reports,
        "ok": all(r.get("ok") for r in reports),
        "problems": [f"{r['scenario']}: {p}" for r in reports for p in r.get("problems", [])],
    }


def render_any(report: dict[str, Any]) -> str:
    if report.get("error"):
        return f"dispatcher bench: scenario {report['scenario']}: ERROR {report['error']}"
    if report["scenario"] == "fast":
        return render(report)
    from . import scenarios

    return scenarios.render(report)


# ------------------------------------------------------------ the raw ceiling client


def _signer(secret: str) -> Callable[[str, int, bytes], str]:
    key = base64.b64decode(secret.removeprefix("whsec_"))
    base = hmac.new(key, digestmod=hashlib.sha256)

    def sign(msg_id: str, ts: int, body: bytes) -> str:
        m = base.copy()
        m.update(f"{msg_id}.{ts}.".encode())
        m.update(body)
        return "v1," + base64.b64encode(m.digest()).decode()

    return sign


def _bodies(n: int) -> Iterator[bytes]:
    rng = random.Random(11)
    for i in range(n):
        yield json.dumps(postback_payload(rng, i), separators=(",", ":")).encode()


async def raw_client(
    url: str, requests: int, concurrency: int, secret: str, prefix: str
) -> dict[str, Any]:
    """A bare aiohttp loop: the same client setup, body kind and headers as the
    dispatcher's sender, and nothing else (no database, no bookkeeping)."""
    from dispatcher import __version__

    # The same collector tuning as `dispatcher run` (see cmd_run), so the
    # ceiling is not lowered by garbage collection the dispatcher avoids.
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 50, 100)
    sign = _signer(secret)
    bodies = list(_bodies(min(requests, 1000)))
    user_agent = f"dispatcher/{__version__}"
    connector = aiohttp.TCPConnector(limit=0, limit_per_host=0, keepalive_timeout=30)
    timeout = aiohttp.ClientTimeout(total=15)
    ok = errors = 0
    next_i = 0

    async with aiohttp.ClientSession(
        connector=connector,
        auto_decompress=False,
        skip_auto_headers=("Accept-Encoding",),
        cookie_jar=aiohttp.DummyCookieJar(),
    ) as session:

        async def worker() -> None:
            nonlocal ok, errors, next_i
            while next_i < requests:
                i = next_i
                next_i += 1
                body = bodies[i % len(bodies)]
                msg_id = f"{prefix}{i}"
                ts = int(time.time())
                headers = {
                    "content-type": "application/json",
                    "user-agent": user_agent,
                    "webhook-id": msg_id,
                    "webhook-timestamp": str(ts),
                    "webhook-signature": sign(msg_id, ts, body),
                }
                try:
                    async with session.post(
                        url, data=body, headers=headers, allow_redirects=False, timeout=timeout
                    ) as resp:
                        await resp.read()
                        if 200 <= resp.status < 300:
                            ok += 1
                        else:
                            errors += 1
                except (aiohttp.ClientError, OSError, TimeoutError):
                    errors += 1

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(min(concurrency, requests))))
        elapsed = time.perf_counter() - t0
    return {
        "requests": requests,
        "ok": ok,
        "errors": errors,
        "seconds": round(elapsed, 3),
        "per_min": round(ok / elapsed * 60, 1),
    }


def raw_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.harness raw")
    p.add_argument("--url", required=True)
    p.add_argument("--requests", type=int, required=True)
    p.add_argument("--concurrency", type=int, required=True)
    p.add_argument("--secret", required=True)
    p.add_argument("--id-prefix", default="raw_")
    a = p.parse_args(argv)
    if a.requests < 1 or a.concurrency < 1:
        p.error("--requests and --concurrency must be at least 1")
    coro = raw_client(a.url, a.requests, a.concurrency, a.secret, a.id_prefix)
    doc = _run(coro)
    sys.stdout.write(json.dumps(doc) + "\n")
    return 0


def _run(coro: Any) -> Any:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a core dependency
        return asyncio.run(coro)
    return uvloop.run(coro)


def cli(argv: list[str] | None = None) -> int:
    """`python -m benchmarks [...]` and `python -m benchmarks.harness [raw ...]`."""
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "raw":
        return raw_main(argv[1:])
    from dispatcher.settings import Settings

    try:
        settings = Settings.from_env()
    except Exception as exc:
        sys.stderr.write(f"bench: error: {exc}\n")
        return 2
    try:
        return int(_run(main(argv, settings)))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(cli())
