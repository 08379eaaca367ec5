"""Child processes of a benchmark run: started, watched and reaped with exact
CPU seconds and peak RSS (from wait4), bounded by the run's deadline.

Owns every process the harness starts (dispatcher commands, receivers, raw
clients); never leaves one behind: children also die with the harness.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import functools
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import BenchError

REPO_ROOT = Path(__file__).resolve().parent.parent


def dispatcher_argv(*args: str) -> list[str]:
    """A `dispatcher` command line.

    The installed console script, run outside the checkout, so that the
    installed package is what runs (the checkout's dispatcher/ lacks schema/)."""
    script = Path(sys.executable).with_name("dispatcher")
    if script.exists():
        return [str(script), *args]
    return [sys.executable, "-m", "dispatcher", *args]


def _runs_our_module(argv: Sequence[str]) -> bool:
    """`python -m benchmarks...`, however it is started (under valgrind too)."""
    return any(a == "-m" and b.startswith("benchmarks") for a, b in itertools.pairwise(argv))


def last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:400] if lines else "(no output on stderr)"


def engine_stats(stderr: str) -> dict[str, Any] | None:
    """The counters of the engine's `engine_stopped` log line, if it wrote one."""
    for line in reversed(stderr.splitlines()):
        if '"engine_stopped"' in line:
            with contextlib.suppress(ValueError):
                doc = json.loads(line)
                return {k: v for k, v in doc.items() if k not in ("ts", "level", "event")}
    return None


def _set_pdeathsig() -> None:  # pragma: no cover - runs in the child
    """Children die with the harness (Linux), so nothing outlives a crash."""
    with contextlib.suppress(Exception):
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
                cwd=REPO_ROOT if _runs_our_module(argv) else self.workdir,
                preexec_fn=_set_pdeathsig if sys.platform == "linux" else None,
            )
        self.live[proc.pid] = proc
        return proc, out_path, err_path

    async def run(
        self, argv: list[str], *, name: str, timeout_s: float | None = None
    ) -> ChildResult:
        """Runs one child to completion; BenchError if it fails or outlives its time."""
        limit = self.remaining() if timeout_s is None else min(timeout_s, self.remaining())
        if limit <= 0:
            raise BenchError(f"overall timeout reached before {name}")
        (result,), _, _ = await self.run_together([argv], [name], limit_s=limit)
        if result.timed_out:
            raise BenchError(f"{name} did not finish within {limit:.0f} s (bounded by --timeout-s)")
        if result.returncode != 0:
            raise BenchError(f"{name} exited {result.returncode}: {last_line(result.stderr)}")
        return result

    async def run_together(
        self,
        argvs: Sequence[list[str]],
        names: Sequence[str],
        *,
        limit_s: float,
        on_tick: Callable[[], Awaitable[None]] | None = None,
        stop_when: Callable[[], Awaitable[bool]] | None = None,
        tick_s: float = 1.0,
        on_tick_every_s: float = 1.0,
        stop_grace_s: float = 60.0,
    ) -> tuple[list[ChildResult], float | None, float]:
        """Runs children side by side. With stop_when, all get SIGTERM once it
        answers true. Returns the results, the perf_counter time of the SIGTERM
        (or None) and of the start. Children still running after limit_s are
        killed (timed_out)."""
        loop = asyncio.get_running_loop()
        t0 = time.perf_counter()
        procs = []
        waiters = []
        exit_at: dict[int, float] = {}
        for k, (argv, name) in enumerate(zip(argvs, names, strict=True)):
            proc, out_path, err_path = self.spawn(argv, name=name)
            procs.append((proc, out_path, err_path, time.perf_counter()))
            w = loop.run_in_executor(None, os.wait4, proc.pid, 0)
            # When the loop learnt of the exit: the wall time of that process.
            w.add_done_callback(functools.partial(_note_exit, exit_at, k))
            waiters.append(w)
        stopped_at: float | None = None
        timed_out = False
        last_tick = 0.0
        end = time.monotonic() + limit_s
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
                        self.kill(proc)
                    await asyncio.wait(waiters, timeout=10)
                    break
        except BaseException:
            for proc, *_ in procs:
                self.kill(proc)
            with contextlib.suppress(BaseException):
                await asyncio.wait(waiters, timeout=10)
            raise
        finally:
            for proc, *_ in procs:
                self.live.pop(proc.pid, None)
        results = []
        for k, ((proc, out_path, err_path, started), w) in enumerate(
            zip(procs, waiters, strict=True)
        ):
            if not w.done():
                raise BenchError(f"{proc.pid} could not be reaped")
            _pid, status, usage = w.result()
            proc.returncode = os.waitstatus_to_exitcode(status)
            results.append(
                ChildResult(
                    returncode=proc.returncode,
                    wall_s=exit_at.get(k, time.perf_counter()) - started,
                    cpu_s=usage.ru_utime + usage.ru_stime,
                    maxrss_mb=usage.ru_maxrss / 1024,  # KiB on Linux
                    stdout=out_path.read_text(errors="replace"),
                    stderr=err_path.read_text(errors="replace"),
                    timed_out=timed_out,
                )
            )
        return results, stopped_at, t0

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


def _note_exit(exit_at: dict[int, float], k: int, _f: object) -> None:
    exit_at.setdefault(k, time.perf_counter())
