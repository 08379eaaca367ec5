"""processes: `run --processes 2` against one process, in the same run.

The same events (fast receiver, one endpoint allowing 2 x --max-in-flight)
drained twice: by one `run --drain --max-in-flight N`, then by `run --drain
--max-in-flight N --processes 2` (a supervising parent and two workers, each
with its own window of N). On a 2-core host the receiver and PostgreSQL
share the cores with the workers, so the gain says how much of a core one
worker leaves unused; the CPU per delivery of the worker and of PostgreSQL
is what sizes a larger host (docs/operations/scaling.md does the sums).
"""

from __future__ import annotations

from typing import Any

from ..bench import Bench, EndpointDef, Options, scenario
from ..output import fmt, fmt_int
from ..phases import drain_phase


def _rows(label: str, m: dict[str, Any]) -> list[list[str]]:
    return [
        [f"{label}: deliveries/min", fmt_int(m["deliveries_per_min"])],
        [f"{label}: dispatcher CPU s / 1,000", fmt(m["dispatcher_cpu_s_per_1000"], 3)],
        [f"{label}: dispatcher CPU s / wall s", fmt(m["dispatcher_cpu_per_wall"], 2)],
        [f"{label}: PostgreSQL CPU s / 1,000", fmt(m["postgres_cpu_s_per_1000"], 3)],
        [f"{label}: lost / duplicates", f"{m['lost']:,} / {m['duplicates']:,}"],
    ]


@scenario
async def run_processes(bench: Bench, opts: Options) -> dict[str, Any]:
    events = bench.size("events", 200_000, 1_000)
    mif = bench.size("max_in_flight", 256, 64)
    ep_mif = bench.size("endpoint_max_in_flight", 2 * mif, 2 * mif)
    bench.report.update(
        title=f"{events:,} events, run --drain --max-in-flight {mif}: 1 process, "
        f"then --processes 2; one endpoint max_in_flight {ep_mif}",
        max_in_flight=mif,
        endpoint_max_in_flight=ep_mif,
    )
    out: dict[str, dict[str, Any]] = {}
    for label, args in (("1 process", ()), ("--processes 2", ("--processes", "2"))):
        rcv = await bench.receiver(f"receiver-{len(out)}")
        eps = [EndpointDef("/hook", rcv, max_in_flight=ep_mif)]
        m = await drain_phase(bench, rcv, eps, events, max_in_flight=mif, label=label,
                              run_args=args)  # fmt: skip
        m.pop("open_series")
        m.pop("paths")
        out[label] = m
    one, two = out["1 process"], out["--processes 2"]
    gain = (
        two["deliveries_per_min"] / one["deliveries_per_min"] if one["deliveries_per_min"] else None
    )
    bench.report.update(one=one, two=two, ratio_two_to_one=None if gain is None else round(gain, 4))
    table = [*_rows("1 process", one), *_rows("--processes 2", two)]
    table.append(["--processes 2 / 1 process", "-" if gain is None else f"{gain:.2f}"])
    bench.report["meets_target"] = None
    return bench.finish(table, [])
