"""instructions: what one delivery costs the worker, counted, not timed.

Two passes, each on a fresh database with one endpoint (max_in_flight 256)
on a receiver that answers at once: N/5 events, then N, each drained by
`dispatcher run --drain --max-in-flight 256` under `valgrind
--tool=callgrind`. Callgrind counts the user-space instructions the worker
executes, which no neighbour on the host changes (a timed run here moves
±10 % between runs). The difference between the passes over the
difference in events is what one more delivery costs, without the
start-up and shutdown both pay. The bare client (`benchmarks.rawclient`,
the raw ceiling's, at concurrency 256) is counted the same way, per
request, against the same receiver. The kernel's share (the sockets) is
in neither: `fast` times that.

Needs valgrind (`apt-get install valgrind`); callgrind runs the worker
about 50 times slower, some 10 s per thousand events on 2 cores.
"""

from __future__ import annotations

import re
import shutil
import sys
from typing import Any

from ..bench import Bench, EndpointDef, Options, run_argv, scenario
from ..errors import BenchError
from ..processes import dispatcher_argv
from ..receiver_control import Receiver

WINDOW = 256
CALLGRIND = ("--tool=callgrind", "--callgrind-out-file=/dev/null")
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
        argv = dispatcher_argv(*run_argv(opts, WINDOW))
        counted[n] = await _count(bench, rcv, [valgrind, *CALLGRIND, *argv], n, "dispatcher")
    bare: dict[int, int] = {}
    for n in (small, events):
        argv = [sys.executable, "-m", "benchmarks.rawclient", "--url", rcv.url_for("/hook"),
                "--requests", str(n), "--concurrency", str(WINDOW), "--secret", eps[0].secret,
                "--id-prefix", f"bare{n}_"]  # fmt: skip
        bare[n] = await _count(bench, rcv, [valgrind, *CALLGRIND, *argv], n, "bare")
    per_delivery = (counted[events] - counted[small]) / (events - small)
    per_request = (bare[events] - bare[small]) / (events - small)
    bench.report["instructions"] = {
        "per_delivery": round(per_delivery),
        "bare_per_request": round(per_request),
        "ratio": round(per_delivery / per_request, 3),
        "passes": {str(n): c for n, c in counted.items()},
        "bare_passes": {str(n): c for n, c in bare.items()},
    }
    rows = [
        ["instructions / delivery", f"{per_delivery:,.0f}"],
        ["bare client instructions / request", f"{per_request:,.0f}"],
        ["dispatcher / bare", f"{per_delivery / per_request:.2f}"],
        *([f"  dispatcher pass of {n:,} events", f"{c:,}"] for n, c in counted.items()),
        *([f"  bare client pass of {n:,} requests", f"{c:,}"] for n, c in bare.items()),
    ]
    return bench.finish(rows, [])


async def _count(bench: Bench, rcv: Receiver, argv: list[str], n: int, who: str) -> int:
    """Runs argv (a program under callgrind that POSTs n times); the
    instructions callgrind counted."""
    before = (await rcv.stats())["count"]
    result = await bench.children.run(argv, name=f"callgrind-{who}-{n}")
    posted = (await rcv.stats())["count"] - before
    found = _COLLECTED.findall(result.stderr)
    if posted != n or not found:
        raise BenchError(f"callgrind pass of the {who}, {n:,}: {posted:,} posted, count {found}")
    return int(found[-1])
