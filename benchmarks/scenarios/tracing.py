"""tracing: what exporting every attempt as a span costs the fast path
(issue 34: within 10 % of tracing off). The fast scenario's drain, rounds
alternating off / on: on, the worker gets `OTEL_EXPORTER_OTLP_ENDPOINT` at
an OTLP/HTTP sink in this process (it decodes each request with
opentelemetry-proto and counts the spans: every delivered attempt must be
there) and the default sampler, parent-based always-on, so every attempt
is a span. Reported: deliveries/min and the worker's CPU per 1,000 of each
(median of the rounds), on / off, and the spans exported.
"""

from __future__ import annotations

import statistics
from typing import Any

from aiohttp import web

from ..bench import Bench, Options, scenario
from ..errors import BenchError
from ..output import fmt, fmt_int, verdict
from ..phases import alternating

EXPECTED_RATIO = 0.9


class _Sink:
    """An OTLP/HTTP traces receiver that counts what it is sent."""

    def __init__(self) -> None:
        self.spans = 0
        self.requests = 0
        self.runner: web.AppRunner | None = None

    async def start(self) -> str:
        try:
            from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
                ExportTraceServiceRequest,
            )
        except ImportError:
            raise BenchError("tracing needs opentelemetry-proto: pip install -e '.[dev]'") from None

        async def traces(request: web.Request) -> web.Response:
            req = ExportTraceServiceRequest()
            req.ParseFromString(await request.read())
            self.requests += 1
            self.spans += sum(len(ss.spans) for rs in req.resource_spans for ss in rs.scope_spans)
            return web.Response(content_type="application/x-protobuf", body=b"")

        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/traces", traces)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        host, port = self.runner.addresses[0][:2]
        return f"http://{host}:{port}"

    async def close(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()


@scenario
async def run_tracing(bench: Bench, opts: Options) -> dict[str, Any]:
    events = bench.size("events", 100_000, 300)
    rounds = bench.size("rounds", 3, 1)
    ep_mif = bench.size("endpoint_max_in_flight", 256, 64)
    bench.report.update(
        title=f"{events:,} events to one endpoint, tracing off vs on (100 %), "
        f"{rounds} round(s) each",
        events=events,
        rounds=rounds,
    )
    sink = _Sink()
    endpoint = await sink.start()

    def otel(mode: str) -> None:
        bench.env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
        if mode == "on":
            bench.env["OTEL_EXPORTER_OTLP_ENDPOINT"] = endpoint

    try:
        rcv = await bench.receiver("receiver")
        phases = await alternating(bench, {"off": rcv, "on": rcv}, events, rounds=rounds,
                                   endpoint_max_in_flight=ep_mif, label="tracing ",
                                   before=otel)  # fmt: skip
    finally:
        bench.env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
        await sink.close()
    rates = {k: [m["deliveries_per_min"] for m in v] for k, v in phases.items()}
    cpu = {k: [m["dispatcher_cpu_s_per_1000"] for m in v] for k, v in phases.items()}
    last = {k: v[-1] for k, v in phases.items()}
    delivered = sum(m["delivered"] for m in phases["on"])
    exported = sink.spans  # the off rounds export none
    med = {k: statistics.median(v) for k, v in rates.items()}
    med_cpu = {k: statistics.median(v) for k, v in cpu.items()}
    ratio = med["on"] / med["off"]
    cpu_ratio = med_cpu["on"] / med_cpu["off"]
    bench.report.update(phases=last, rates=rates, cpu_s_per_1000=cpu, ratio=round(ratio, 3),
                        cpu_ratio=round(cpu_ratio, 3), spans_exported=exported,
                        export_requests=sink.requests)  # fmt: skip
    table = [
        ["", "off", "on (every attempt)"],
        ["deliveries/min (median)", fmt_int(med["off"]), fmt_int(med["on"])],
        ["  runs", " / ".join(fmt_int(r) for r in rates["off"]),
         " / ".join(fmt_int(r) for r in rates["on"])],
        ["dispatcher CPU s / 1,000 (median)", fmt(med_cpu["off"], 3), fmt(med_cpu["on"], 3)],
        ["spans exported / delivered", "", f"{exported:,} / {delivered:,}"],
        ["on / off: rate, CPU per delivery", f"{ratio:.3f}", f"{cpu_ratio:.3f}"],
    ]  # fmt: skip
    complete = exported >= delivered
    judged = None if opts.smoke else ratio >= EXPECTED_RATIO
    verdicts = [
        verdict(f"on >= {EXPECTED_RATIO} x off", judged, f"{ratio:.2f}"),
        verdict("every delivered attempt exported", complete, f"{exported:,} spans"),
    ]
    if not complete:
        bench.problems.append("spans missing at the OTLP sink")
    return bench.finish(table, verdicts)
