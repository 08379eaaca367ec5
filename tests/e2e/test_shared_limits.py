"""Per-endpoint limits hold across `dispatcher run` processes from their
first request (issue 26): started together, or one joining a running one,
over every one-second window of what the receiver saw.

Two endpoints, each bound by one limit: `/rate` (50 a second, burst 1, fast
answers) and `/busy` (10 in flight, answers after 0.2 s). Default refresh
interval: what keeps the limits is the workers' published shares and the
notifications, not a fast poll. The serial lane: a count over one second is
what is asserted.
"""

from __future__ import annotations

import asyncio
import bisect
import math
import sys
from pathlib import Path

import asyncpg
import pytest
from aiohttp import web

from dispatcher.db import catalog
from tests.helpers import add_endpoint, cli_env, statuses
from tests.receivers import Receiver

pytestmark = pytest.mark.serial

RATE = 50
IN_FLIGHT = 10
ROWS = 250  # per endpoint: five seconds of either limit


class Concurrency:
    """The receiver's requests to one path being answered at once."""

    def __init__(self, answer_after_s: float) -> None:
        self.now = 0
        self.most = 0
        self._after = answer_after_s

    async def __call__(self, _: Receiver, __: web.Request, ___: bytes) -> web.StreamResponse:
        self.now += 1
        self.most = max(self.most, self.now)
        try:
            await asyncio.sleep(self._after)
        finally:
            self.now -= 1
        return web.Response(status=200)


class LoopLag:
    """The longest the receiver's own loop was late to a 5 ms tick while it
    ran: how late the receiver can have stamped a request it had been sent."""

    TICK_S = 0.005

    def __init__(self) -> None:
        self.most = 0.0
        self._task: asyncio.Task[None] | None = None

    async def _tick(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            before = loop.time()
            await asyncio.sleep(self.TICK_S)
            self.most = max(self.most, loop.time() - before - self.TICK_S)

    def __enter__(self) -> LoopLag:
        self._task = asyncio.get_running_loop().create_task(self._tick())
        return self

    def __exit__(self, *_: object) -> None:
        assert self._task is not None
        self._task.cancel()


def busiest_second(times: list[float]) -> int:
    """Most arrivals in any window [t, t + 1 s) that starts at an arrival."""
    times = sorted(times)
    return max((bisect.bisect_left(times, t + 1.0) - i for i, t in enumerate(times)), default=0)


async def _start(db_url: str, log: Path) -> asyncio.subprocess.Process:
    with log.open("ab") as err:
        return await asyncio.create_subprocess_exec(
            sys.executable, "-m", "dispatcher", "run", "--drain",
            env=cli_env(db_url, DISPATCHER_LEASE_MARGIN_S="1", DISPATCHER_GRACE_S="10"),
            stdout=asyncio.subprocess.DEVNULL, stderr=err,
        )  # fmt: skip


async def _run(db_url: str, conn: asyncpg.Connection, receiver: Receiver, tmp_path: Path,
               together: int, joining: int) -> tuple[int, int, float]:  # fmt: skip
    """`together` workers started at once, then `joining` more, one at a
    time, each once a second's worth has arrived since the last; returns
    (busiest second at /rate, most requests in flight at /busy, the
    receiver's longest loop lag in seconds)."""
    busy = Concurrency(0.2)
    receiver.routes["/busy"] = busy
    await add_endpoint(conn, receiver.url("/rate"), rate_per_s=RATE, burst=1,
                       max_in_flight=IN_FLIGHT, event_types=("rate",))  # fmt: skip
    await add_endpoint(conn, receiver.url("/busy"), max_in_flight=IN_FLIGHT, event_types=("busy",))
    rows = [(f"{t}{i}", t, "{}", None) for t in ("rate", "busy") for i in range(ROWS)]
    await catalog.enqueue_bulk(conn, rows)
    log = tmp_path / "workers.log"
    lag = LoopLag()
    procs = [await _start(db_url, log) for _ in range(together)]
    with lag:
        try:
            for _ in range(joining):
                seen = len(receiver.requests_to("/rate"))
                while len(receiver.requests_to("/rate")) < seen + RATE:
                    await asyncio.sleep(0.02)
                procs.append(await _start(db_url, log))
            codes = await asyncio.wait_for(asyncio.gather(*(p.wait() for p in procs)), 90)
        finally:
            for p in procs:
                if p.returncode is None:
                    p.kill()
                    await p.wait()
    assert codes == [0] * len(procs), log.read_text()[-3000:]
    assert await statuses(conn) == {"delivered": 2 * ROWS}
    return busiest_second([r.at for r in receiver.requests_to("/rate")]), busy.most, lag.most


# Over any second: at most the rate at the senders, plus one a process at
# the receiver. Each process's bucket holds one token at most and sends when
# one comes in, so no second of its sends holds more than its share of the
# rate (shares of 50 over 10 places are whole: 25 + 25, 20 + 15 + 15); but
# the receiver stamps a request when its own loop reads it, and a loop held
# up (the scheduler on a loaded 2-core machine) stamps what arrived
# meanwhile together, inside a window that the next requests also land in:
# at most the rate times the receiver's longest lag, measured by LoopLag
# during the run (4-14 ms here, quiet or with both cores busy: one request;
# CI twice saw 58-60 with three workers, not reproduced here, and the
# assertion prints the lag it allowed for). Seen: at most the
# rate itself, plus one (before issue 26's fix: 53-65). In flight: no
# excuse, the receiver counts its own handlers.
@pytest.mark.parametrize(("together", "joining"), [(2, 0), (3, 0), (1, 1), (1, 2)])
async def test_limits_hold_in_every_second_from_the_first_request(
    db_url: str, conn: asyncpg.Connection, receiver: Receiver, tmp_path: Path,
    together: int, joining: int,
) -> None:  # fmt: skip
    busiest, most, lag = await _run(db_url, conn, receiver, tmp_path, together, joining)
    late = math.ceil(RATE * lag)  # sent on time, stamped late: see above
    assert busiest <= RATE + together + joining + late, (busiest, lag)
    assert most <= IN_FLIGHT, most
