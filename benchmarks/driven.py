"""Dispatcher children that run while a driver coroutine does the scenario's
work (load, waits, samples), and get SIGTERM when it ends.

The driver starts on the first tick, once the children are up; its error,
if any, is raised after the children have stopped; the driver is cancelled
if the children end or time out first.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from typing import Any

from .bench import Bench
from .output import progress
from .processes import ChildResult


async def run_driven(
    bench: Bench,
    argvs: list[list[str]],
    names: list[str],
    driver: Callable[[], Coroutine[Any, Any, None]],
    label: Callable[[], str],
    *,
    tick_s: float = 0.2,
) -> list[ChildResult]:
    task: asyncio.Task[None] | None = None

    async def stop_when() -> bool:
        nonlocal task
        if task is None:
            task = asyncio.create_task(driver(), name=f"bench-{bench.opts.scenario}-driver")
        if task.done():
            task.result()
            return True
        return False

    async def tick() -> None:
        progress(label(), transient=True)

    try:
        runs, _stopped_at, _t0 = await bench.children.run_together(
            argvs, names, limit_s=bench.run_limit_s(), on_tick=tick,
            stop_when=stop_when, tick_s=tick_s,
        )  # fmt: skip
    finally:
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
    return runs
