"""instructions: what one delivery costs the worker, counted, not timed.

Two passes, each on a fresh database with one endpoint (max_in_flight 256)
on a receiver that answers at once: N/5 events, then N, each drained by
`dispatcher run --drain --max-in-flight 256` under `valgrind
--tool=callgrind`. Callgrind counts the user-space instructions the worker
executes, which no neighbour on the host changes (a timed run here moves
±10 % between runs). The difference between the passes over the
difference in events is what one more delivery costs, without the
start-up and shutdown both pay. The kernel's share (the sockets) is not in
it: `fast` times that.

Needs valgrind (`apt-get install valgrind`); callgrind runs the worker
about 50 times slower, some 10 s per thousand events on 2 cores.
"""

from __future__ import annotations

import re
import shutil
from typing import Any

from ..bench import Bench, EndpointDef, Options, run_argv, scenario
from ..errors import BenchError
from ..processes import dispatcher_argv

WINDOW = 256
_COLLECTED = re.compile(r"Collected : (\d+)")


@scenario
async def run_instructions(bench: Bench, opts: Options) -> dict[str, Any]:
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise BenchError("instructions needs valgrind: apt-get install valgrind")
    events = bench.size("events", 10_000, 500)
    small = max(events // 5, 1)
    bench.report.update(
        title=f"instructions per delivery: {small:,} and {events:,} events, window {WINDOW}",
        events=events,
    )
    rcv = await bench.receiver("receiver", latency_ms=0.0)
    eps = [EndpointDef("/hook", rcv, max_in_flight=WINDOW)]
    counted: dict[int, int] = {}
    for n in (small, events):
        await bench.fresh_db()
        await bench.add_endpoints(eps)
        await bench.enqueue([(eps[0], n)], addressed=False)
        before = (await rcv.stats())["count"]
        argv = dispatcher_argv(*run_argv(opts, WINDOW))
        result = await bench.children.run(
            [valgrind, "--tool=callgrind", "--callgrind-out-file=/dev/null", *argv],
            name=f"callgrind-{n}",
        )
        posted = (await rcv.stats())["count"] - before
        found = _COLLECTED.findall(result.stderr)
        if posted != n or not found:
            raise BenchError(f"callgrind pass of {n:,} events: {posted:,} posted, count {found}")
        counted[n] = int(found[-1])
    per_delivery = (counted[events] - counted[small]) / (events - small)
    bench.report["instructions"] = {
        "per_delivery": round(per_delivery),
        "passes": {str(n): c for n, c in counted.items()},
    }
    rows = [
        ["instructions / delivery", f"{per_delivery:,.0f}"],
        *([f"  pass of {n:,} events", f"{c:,}"] for n, c in counted.items()),
    ]
    return bench.finish(rows, [])
