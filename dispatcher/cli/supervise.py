"""`dispatcher run --processes N|auto`: one parent, N worker processes.

Each child is a plain `dispatcher run` (the same flags but `--processes`),
with an engine and a pool of its own; the children share the work through
the database as workers on several hosts do. The parent starts them,
relays what they write on stderr with each line labelled (`dispatcher:
worker process 1: …`, or `"child": 1` first in a JSON line), restarts one
that dies (backoff from 1 s doubling to 30 s, back to 1 s after a child ran
a minute), and gives up, with one line and exit 1 (2 when each child said
its input was bad), once every child has failed its start three times in a
row: the database refusing or a flag that is wrong is not cured by
restarts. With `--http HOST:PORT`, child i serves its admin API and
/metrics on PORT+i: one address per process, no aggregation in the parent
(Prometheus scrapes each as it would a worker per container). It never
touches the database itself.

Signals: each child runs in a session of its own, so a terminal's Ctrl-C
reaches the parent alone, which passes it on: SIGINT to a child that is up
(it says what it waits for, and a second Ctrl-C stops it at once, as a
single `run` does), SIGTERM to one still starting (a SIGINT there would be
a KeyboardInterrupt in the middle of its imports). SIGTERM (and SIGHUP:
the terminal went away) become SIGTERM to each: a quiet stop within the
grace period. The parent exits 0 when every child stopped as asked, 1 if
one did not (and says which).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path

import dispatcher
from dispatcher import log
from dispatcher.core.errors import BadInput, DispatcherError, OperationalError

FIRST_BACKOFF_S = 1.0
MAX_BACKOFF_S = 30.0
# A child that ran this long before dying starts its backoff over; one that
# died sooner failed its start.
STEADY_S = 60.0
# Failed starts in a row, for every child, before the parent gives up (a
# child that exits 2, bad input, counts them all at once).
FAILED_STARTS = 3
BAD_INPUT = 2


def process_count(value: str) -> int:
    """`auto`: the cores this process may run on; else a positive number."""
    if value == "auto":
        try:
            return len(os.sched_getaffinity(0))
        except AttributeError:  # not on Linux
            return os.cpu_count() or 1
    try:
        n = int(value)
    except ValueError:
        raise BadInput(f"--processes: a number or auto, not {value!r}") from None
    if n < 1:
        raise BadInput("--processes must be at least 1")
    return n


def child_argv(argv: list[str], index: int) -> list[str]:
    """The parent's arguments without --processes, and --http moved to
    PORT+index."""
    out: list[str] = []
    it = iter(argv)
    for a in it:
        if a == "--processes":
            next(it, None)
        elif a.startswith("--processes="):
            continue
        elif a == "--http" or a.startswith("--http="):
            value = a.partition("=")[2] if "=" in a else next(it, "")
            host, _, port = value.rpartition(":")
            if not port.isdigit():
                raise BadInput(f"--http: HOST:PORT with a port number, not {value!r}")
            out += ["--http", f"{host}:{int(port) + index}"]
        else:
            out.append(a)
    return out


def child_command(args: list[str]) -> list[str]:
    """`-P`: `python -m` would otherwise put the working directory first on
    sys.path, and a source checkout there (other code than the installed
    package the parent runs) would be what every child imports."""
    return [sys.executable, "-P", "-m", "dispatcher", *args]


def child_env(env: dict[str, str]) -> dict[str, str]:
    """`env`, with the folder the parent's own `dispatcher` came from first
    on PYTHONPATH when a `-P` child would not find it otherwise (the parent
    itself imported it from its working directory or through an editable
    install's finder): a child always runs the parent's code."""
    root = str(Path(dispatcher.__file__).resolve().parent.parent)
    # sys.path[0] is the script's folder, or the working directory under
    # `python -m`: the very entry -P drops in the child.
    inherited = sys.path if sys.flags.safe_path else sys.path[1:]
    if root in {str(Path(p).resolve()) for p in inherited if p}:
        return env
    previous = env.get("PYTHONPATH")
    return {**env, "PYTHONPATH": root if not previous else root + os.pathsep + previous}


def child_log_env(env: dict[str, str]) -> dict[str, str]:
    """The children write to the parent's pipe, not to its terminal: an
    `auto` log format is decided here, from the parent's stderr, as each
    child's own would have been."""
    if (env.get("DISPATCHER_LOG_FORMAT") or "auto").strip().lower() != "auto":
        return env
    try:
        text = sys.stderr.isatty()
    except (AttributeError, ValueError):
        text = False
    return {**env, "DISPATCHER_LOG_FORMAT": "text" if text else "json"}


def ready(pid: int) -> bool:
    """Whether child `pid` handles SIGTERM yet: `run` sets its SIGTERM and
    SIGINT handlers together, past its imports and its first connection.
    Linux's /proc says; elsewhere a child is never taken as ready (it gets
    SIGTERM: a stop as graceful, only quieter)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (signal.SIGTERM - 1) & 1)
    except (OSError, ValueError):
        pass
    return False


def label(index: int, line: str) -> str:
    """A child's stderr line as the parent writes it."""
    if line.startswith("{"):
        rest = line[1:].lstrip()
        return f'{{"child":{index}' + ("}" if rest.startswith("}") else "," + rest)
    if line.startswith("dispatcher: "):
        return f"dispatcher: worker process {index}: " + line.removeprefix("dispatcher: ")
    return f"worker process {index}: {line}"


def _exit(code: int) -> dict[str, object]:
    """An exit status as log fields: the signal's name when one ended it."""
    if code < 0:
        with contextlib.suppress(ValueError):
            return {"code": code, "signal": signal.Signals(-code).name}
    return {"code": code}


@dataclass
class _Pool:
    """The children, what the parent told each, and what their failures say."""

    argv: list[list[str]]  # per child
    env: dict[str, str]
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    running: dict[int, asyncio.subprocess.Process] = field(default_factory=dict)
    told: dict[int, int] = field(default_factory=dict)  # pid -> the last signal sent
    failed_starts: dict[int, int] = field(default_factory=dict)  # per child still wanted
    last_codes: dict[int, int] = field(default_factory=dict)
    last_error: tuple[int, str] | None = None  # a child's last error line
    gave_up: DispatcherError | None = None

    def stop(self, sig: int) -> None:
        """A signal to the parent: passed on to every child (again on each)."""
        self.stopping.set()
        for proc in list(self.running.values()):
            self.tell(proc, sig)

    def tell(self, proc: asyncio.subprocess.Process, sig: int) -> None:
        if proc.returncode is not None:
            return
        if sig != signal.SIGTERM and not ready(proc.pid):
            sig = signal.SIGTERM
        self.told[proc.pid] = sig
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(sig)

    def relay(self, index: int, raw: bytes) -> None:
        line = raw.decode(errors="replace").rstrip("\r")
        if line.startswith("dispatcher: error: "):
            self.last_error = (index, line.removeprefix("dispatcher: error: "))
        elif line.startswith("dispatcher: internal error: "):
            self.last_error = (index, line.removeprefix("dispatcher: "))
        sys.stderr.write(label(index, line) + "\n")
        sys.stderr.flush()

    def failing(self) -> bool:
        """Every child still wanted has failed its start FAILED_STARTS times in a row."""
        counts = self.failed_starts.values()
        return bool(counts) and all(c >= FAILED_STARTS for c in counts)

    def give_up(self) -> None:
        codes = set(self.last_codes.values())
        n = len(self.failed_starts)
        if codes == {BAD_INPUT}:
            words = f"the {n} worker processes exited at start with code 2 (bad input)"
        else:
            last = ", ".join(str(c) for c in sorted(codes))
            words = (
                f"the {n} worker processes keep failing at start ({FAILED_STARTS} tries each, "
                f"exit code {last})"
            )
        words += ": giving up"
        if self.last_error is not None:
            words += f"; worker process {self.last_error[0]} said: {self.last_error[1]}"
        self.gave_up = (BadInput if codes == {BAD_INPUT} else OperationalError)(words)
        self.stop(signal.SIGTERM)


async def supervise(n: int, database_url: str) -> int:
    env = child_log_env(child_env({**os.environ, "DATABASE_URL": database_url}))
    pool = _Pool([child_command(child_argv(sys.argv[1:], i)) for i in range(n)], env)
    pool.failed_starts = dict.fromkeys(range(n), 0)
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGINT, pool.stop, signal.SIGINT)
    loop.add_signal_handler(signal.SIGTERM, pool.stop, signal.SIGTERM)
    # The terminal went away: the children, in sessions of their own, would
    # not hear of it.
    loop.add_signal_handler(signal.SIGHUP, pool.stop, signal.SIGTERM)
    log.event("supervisor_started", processes=n, pid=os.getpid())
    children = [asyncio.create_task(_keep(pool, i), name=f"dispatcher-child-{i}") for i in range(n)]
    codes = await asyncio.gather(*children)
    if pool.gave_up is not None:
        raise pool.gave_up
    log.event("supervisor_stopped", processes=n)
    return max(codes)


async def _keep(pool: _Pool, index: int) -> int:
    """Runs child `index` until the parent stops; restarts it when it dies.
    A child that exits 0 by itself (`--drain`) is done. 0: it stopped as
    asked (or was done); 1: it did not, or was down after failing."""
    backoff = FIRST_BACKOFF_S
    loop = asyncio.get_running_loop()
    while True:
        started = loop.time()
        proc = await asyncio.create_subprocess_exec(
            *pool.argv[index], env=pool.env, stdin=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE, start_new_session=True,
        )  # fmt: skip
        pool.running[index] = proc
        log.event("child_started", child=index, pid=proc.pid)
        if pool.stopping.is_set():  # the stop came while it was being started
            pool.tell(proc, signal.SIGTERM)
        relay = asyncio.create_task(_relay(pool, index, proc))
        code = await proc.wait()
        await relay
        del pool.running[index]
        told = pool.told.pop(proc.pid, None)
        if code == 0 or (told is not None and code == -told):
            pool.failed_starts.pop(index, None)  # done, or stopped as asked
            return 0
        if pool.stopping.is_set():
            # Not as asked: it crashed, or something else killed it.
            log.event("child_lost", logging.WARNING, child=index, pid=proc.pid, **_exit(code))
            return 1
        at_start = loop.time() - started < STEADY_S
        if not at_start:
            backoff = FIRST_BACKOFF_S
        tries = pool.failed_starts.get(index, 0) + 1 if at_start else 0
        pool.failed_starts[index] = FAILED_STARTS if at_start and code == BAD_INPUT else tries
        pool.last_codes[index] = code
        if pool.failing():
            pool.give_up()
            return 1
        log.event("child_died", logging.WARNING, child=index, pid=proc.pid,
                  restart_in_s=backoff, **_exit(code))  # fmt: skip
        try:
            await asyncio.wait_for(pool.stopping.wait(), backoff)
            # Stopped while this child was down, waiting to be started
            # again: nothing of it is left to stop (giving up says 1).
            return 0
        except TimeoutError:
            pass
        backoff = min(backoff * 2, MAX_BACKOFF_S)


async def _relay(pool: _Pool, index: int, proc: asyncio.subprocess.Process) -> None:
    """The child's stderr, line by line, to the parent's."""
    assert proc.stderr is not None
    pending = b""
    while chunk := await proc.stderr.read(65536):
        *lines, pending = (pending + chunk).split(b"\n")
        for line in lines:
            pool.relay(index, line)
    if pending:
        pool.relay(index, pending)
