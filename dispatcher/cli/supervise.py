"""`dispatcher run --processes N|auto`: one parent, N worker processes.

Each child is a plain `dispatcher run` (the same flags but `--processes`),
with an engine and a pool of its own; the children share the work through
the database as workers on several hosts do. The parent only starts them,
restarts one that dies (backoff from 1 s doubling to 30 s, back to 1 s
after a child ran a minute), and on SIGTERM or SIGINT passes SIGTERM to
each and waits for them (each winds down within its grace period), then
exits 0. With `--http HOST:PORT`, child i serves its admin API and
/metrics on PORT+i: one address per process, no aggregation in the parent
(Prometheus scrapes each as it would a worker per container). It never
touches the database itself.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import dispatcher
from dispatcher import log
from dispatcher.core.errors import BadInput

FIRST_BACKOFF_S = 1.0
MAX_BACKOFF_S = 30.0
# A child that ran this long before dying starts its backoff over.
STEADY_S = 60.0


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


async def supervise(n: int, database_url: str) -> int:
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    env = child_env({**os.environ, "DATABASE_URL": database_url})
    log.event("supervisor_started", processes=n, pid=os.getpid())
    children = [
        asyncio.create_task(_keep(i, env, stopping), name=f"dispatcher-child-{i}") for i in range(n)
    ]
    codes = await asyncio.gather(*children)
    log.event("supervisor_stopped", processes=n)
    return max(codes)


async def _keep(index: int, env: dict[str, str], stopping: asyncio.Event) -> int:
    """Runs child `index` until the parent stops; restarts it when it dies.
    A child that exits 0 by itself (`--drain`) is done."""
    argv = child_command(child_argv(sys.argv[1:], index))
    backoff = FIRST_BACKOFF_S
    loop = asyncio.get_running_loop()
    while True:
        started = loop.time()
        proc = await asyncio.create_subprocess_exec(*argv, env=env)
        log.event("child_started", child=index, pid=proc.pid)
        waiting = asyncio.create_task(proc.wait())
        stop = asyncio.create_task(stopping.wait())
        await asyncio.wait({waiting, stop}, return_when=asyncio.FIRST_COMPLETED)
        if not waiting.done():
            proc.send_signal(signal.SIGTERM)
            code = await waiting
            return 0 if code == 0 else 1
        stop.cancel()
        code = waiting.result()
        if code == 0:
            return 0
        if stopping.is_set():
            return 1
        if loop.time() - started >= STEADY_S:
            backoff = FIRST_BACKOFF_S
        log.event("child_died", child=index, pid=proc.pid, code=code, restart_in_s=backoff)
        try:
            await asyncio.wait_for(stopping.wait(), backoff)
            return 0
        except TimeoutError:
            pass
        backoff = min(backoff * 2, MAX_BACKOFF_S)
