"""Broker destinations against the broker's own client (issue 33).

`python -m benchmarks.brokers [--events 50000] [--brokers amqp,nats,redis] [--concurrency 100]`:

for each broker, in the same run:
1. raw: the broker's own asyncio client publishing EVENTS messages with the
   body and the signed headers dispatcher sends, from CONCURRENCY tasks each
   waiting for its acknowledgement (RabbitMQ confirm, JetStream PubAck,
   XADD's answer) before the next: the ceiling for that acknowledgement;
2. dispatcher: a scratch database, one endpoint on the broker with
   max_in_flight CONCURRENCY, EVENTS events enqueued, then `dispatcher run
   --drain` as a process; the rate is the broker's own count, sampled every
   0.1 s, from its first message to its last (the worker's start-up is
   not in it), and the count at the broker must be EVENTS (nothing lost).

Prints one JSON document: per broker the two rates per minute and their
ratio. Uses DATABASE_URL's server (default 127.0.0.1:5432) and the brokers
on 127.0.0.1 (5672, 4222, 6379); removes what it made.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import aio_pika
import asyncpg
import nats
import redis.asyncio

from dispatcher import db
from dispatcher.core.signing import Signer

from .database import drop_database
from .processes import dispatcher_argv

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
BODY_PAD = "x" * 200  # a payload of about 250 bytes, as the fast scenario's


def _body(i: int) -> bytes:
    return json.dumps({"n": i, "pad": BODY_PAD}, separators=(",", ":")).encode()


def _headers(signer: Signer, event_id: str, body: bytes) -> dict[str, str]:
    ts = int(time.time())
    return {
        "webhook-id": event_id,
        "webhook-timestamp": str(ts),
        "webhook-signature": signer.signature(event_id, ts, body),
        "event-type": "t",
        "content-type": "application/json",
    }


class Broker:
    """One broker's destination: made, counted, published to raw, removed."""

    url: str

    async def setup(self) -> None: ...
    async def count(self) -> int:
        raise NotImplementedError

    async def publisher(self) -> Callable[[str, bytes, dict[str, str]], Awaitable[None]]:
        raise NotImplementedError

    async def teardown(self) -> None: ...


class Amqp(Broker):
    def __init__(self) -> None:
        self.name = f"dispatcher-bench-{uuid.uuid4().hex[:8]}"
        self.url = f"amqp://guest:guest@127.0.0.1:5672/?exchange={self.name}&routing_key=k"

    async def setup(self) -> None:
        self.conn = await aio_pika.connect("amqp://guest:guest@127.0.0.1:5672/")
        ch = await self.conn.channel()
        self.exchange = await ch.declare_exchange(self.name, aio_pika.ExchangeType.DIRECT)
        self.queue = await ch.declare_queue(self.name, durable=True)
        await self.queue.bind(self.exchange, routing_key="k")

    async def count(self) -> int:
        ch = await self.conn.channel()
        q = await ch.declare_queue(self.name, passive=True)
        n = q.declaration_result.message_count or 0
        await ch.close()
        return n

    async def publisher(self) -> Callable[[str, bytes, dict[str, str]], Awaitable[None]]:
        ch = await self.conn.channel(publisher_confirms=True, on_return_raises=True)
        exchange = await ch.get_exchange(self.name, ensure=False)

        async def publish(event_id: str, body: bytes, headers: dict[str, str]) -> None:
            message = aio_pika.Message(
                body, headers=dict(headers), content_type="application/json",
                delivery_mode=aio_pika.DeliveryMode.PERSISTENT, message_id=event_id, type="t",
            )  # fmt: skip
            await exchange.publish(message, routing_key="k", mandatory=True)

        return publish

    async def teardown(self) -> None:
        await self.queue.purge()

    async def close(self) -> None:
        await self.queue.delete(if_unused=False, if_empty=False)
        await self.exchange.delete()
        await self.conn.close()


class Nats(Broker):
    def __init__(self) -> None:
        self.stream = f"DB{uuid.uuid4().hex[:8]}"
        self.subject = f"{self.stream.lower()}.t"
        self.url = f"nats://127.0.0.1:4222/{self.subject}"

    async def setup(self) -> None:
        self.nc = await nats.connect("nats://127.0.0.1:4222")
        self.js = self.nc.jetstream()
        await self.js.add_stream(name=self.stream, subjects=[self.subject])

    async def count(self) -> int:
        return int((await self.js.stream_info(self.stream)).state.messages)

    async def publisher(self) -> Callable[[str, bytes, dict[str, str]], Awaitable[None]]:
        async def publish(event_id: str, body: bytes, headers: dict[str, str]) -> None:
            await self.js.publish(self.subject, body, headers={**headers, "Nats-Msg-Id": event_id})

        return publish

    async def teardown(self) -> None:
        await self.js.purge_stream(self.stream)

    async def close(self) -> None:
        await self.js.delete_stream(self.stream)
        await self.nc.close()


class Redis(Broker):
    def __init__(self) -> None:
        self.key = f"dispatcher-bench-{uuid.uuid4().hex[:8]}"
        self.url = f"redis://127.0.0.1:6379/0?stream={self.key}"

    async def setup(self) -> None:
        # As dispatcher's link: a blocking pool of 16 connections.
        pool = redis.asyncio.BlockingConnectionPool(host="127.0.0.1", port=6379,
                                                    max_connections=16, timeout=None)  # fmt: skip
        self.r = redis.asyncio.Redis(connection_pool=pool)

    async def count(self) -> int:
        return int(await self.r.xlen(self.key))

    async def publisher(self) -> Callable[[str, bytes, dict[str, str]], Awaitable[None]]:
        async def publish(event_id: str, body: bytes, headers: dict[str, str]) -> None:
            fields: dict[Any, Any] = {"body": body, **headers}
            await self.r.xadd(self.key, fields)

        return publish

    async def teardown(self) -> None:
        await self.r.delete(self.key)

    async def close(self) -> None:
        await self.r.delete(self.key)
        await self.r.aclose(close_connection_pool=True)


BROKERS: dict[str, Callable[[], Any]] = {"amqp": Amqp, "nats": Nats, "redis": Redis}


async def raw(broker: Any, events: int, concurrency: int) -> dict[str, Any]:
    publish = await broker.publisher()
    signer = Signer((SECRET,))
    ids = iter(range(events))

    async def one() -> None:
        for i in ids:
            body = _body(i)
            event_id = f"raw-{i}"
            await publish(event_id, body, _headers(signer, event_id, body))

    t0 = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(concurrency)))
    seconds = time.perf_counter() - t0
    got = await broker.count()
    return {"per_min": round(events / seconds * 60), "seconds": round(seconds, 2), "at_broker": got}


async def through_dispatcher(
    broker: Any, server: str, events: int, concurrency: int
) -> dict[str, Any]:
    name = "dispatcher_bench_brokers"
    url = await db.recreate_database(server, name)
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(
            "INSERT INTO endpoints (url, secret, max_in_flight) VALUES ($1, $2, $3)",
            broker.url, SECRET, concurrency,
        )  # fmt: skip
        await conn.execute(
            "SELECT dispatcher_enqueue('t', json_build_object('n', g, 'pad', $2::text)::json,"
            " 'e' || g) FROM generate_series(1, $1) g",
            events, BODY_PAD,
        )  # fmt: skip
        env = {**os.environ, "DATABASE_URL": url, "DISPATCHER_ALLOW_PRIVATE_TARGETS": "1"}
        proc = await asyncio.create_subprocess_exec(
            *dispatcher_argv("run", "--drain"), env=env,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        first: tuple[float, int] | None = None
        last = (time.perf_counter(), 0)
        deadline = time.perf_counter() + 600
        while time.perf_counter() < deadline:
            n = await broker.count()
            now = time.perf_counter()
            if n and first is None:
                first = (now, n)
            if n != last[1]:
                last = (now, n)
            if n >= events or proc.returncode is not None:
                break
            await asyncio.sleep(0.1)
        rc = await asyncio.wait_for(proc.wait(), 120)
        got = await broker.count()
        delivered = await conn.fetchval(
            "SELECT count(*) FROM webhook_queue WHERE status = 'delivered'"
        )
        per_min = None
        if first is not None and last[0] > first[0]:
            per_min = round((last[1] - first[1]) / (last[0] - first[0]) * 60)
        return {"per_min": per_min, "exit": rc, "at_broker": got, "delivered": delivered}
    finally:
        await conn.close()
        await drop_database(server, name)


async def run_one(kind: str, server: str, events: int, concurrency: int) -> dict[str, Any]:
    broker = BROKERS[kind]()
    await broker.setup()
    try:
        ceiling = await raw(broker, events, concurrency)
        await broker.teardown()
        ours = await through_dispatcher(broker, server, events, concurrency)
    finally:
        await broker.close()
    ratio = round(ours["per_min"] / ceiling["per_min"], 2) if ours["per_min"] else None
    lost = events - ours["at_broker"]
    return {"broker": kind, "events": events, "concurrency": concurrency, "raw": ceiling,
            "dispatcher": ours, "ratio": ratio, "lost_at_broker": max(0, lost)}  # fmt: skip


async def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.brokers")
    p.add_argument("--events", type=int, default=50_000)
    p.add_argument("--brokers", default="amqp,nats,redis")
    p.add_argument("--concurrency", type=int, default=100)
    a = p.parse_args(argv)
    server = os.environ.get("DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
    report = []
    for kind in (k.strip() for k in a.brokers.split(",") if k.strip()):
        report.append(await run_one(kind, server, a.events, a.concurrency))
        print(json.dumps(report[-1]), file=sys.stderr)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
