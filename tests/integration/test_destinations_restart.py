"""RabbitMQ restarted mid-run (issue 33): the machine's one server, so the
serial lane (nothing else publishes to it meanwhile). `rabbitmqctl
stop_app` closes every connection and stops the broker; `start_app`
brings it back with its durable queue and the persistent messages it
confirmed. Every event arrives; re-sent at most what was unconfirmed."""

from __future__ import annotations

import asyncio
import shutil
import uuid

import aio_pika
import asyncpg
import pytest

from tests.helpers import add_endpoint, engine, statuses
from tests.integration.test_destinations import IN_FLIGHT, RESTART_N, SECRET, _enqueue

pytestmark = pytest.mark.serial

MQ = "amqp://guest:guest@127.0.0.1:5672/"


async def _ctl(*args: str) -> None:
    proc = await asyncio.create_subprocess_exec(
        "rabbitmqctl", *args, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
    )
    assert await asyncio.wait_for(proc.wait(), 60) == 0, args


async def _connected() -> aio_pika.abc.AbstractConnection:
    for _ in range(120):  # bounded: 60 s
        try:
            return await aio_pika.connect(MQ)
        except (OSError, aio_pika.exceptions.AMQPConnectionError):
            await asyncio.sleep(0.5)
    raise AssertionError("RabbitMQ did not come back")


async def test_a_rabbitmq_restart_mid_run_loses_nothing(
    db_url: str, conn: asyncpg.Connection
) -> None:
    if shutil.which("rabbitmqctl") is None:
        pytest.skip("rabbitmqctl is not installed: the broker cannot be restarted here")
    name = f"dispatcher-restart-{uuid.uuid4().hex[:8]}"
    mq = await _connected()
    channel = await mq.channel()
    exchange = await channel.declare_exchange(name, aio_pika.ExchangeType.DIRECT, durable=True)
    queue = await channel.declare_queue(name, durable=True)
    await queue.bind(exchange, routing_key="k")
    await add_endpoint(conn, f"{MQ}?exchange={name}&routing_key=k", secret=SECRET,
                       rate_per_s=300.0, max_in_flight=IN_FLIGHT, max_attempts=30,
                       retry_base_ms=100, retry_cap_ms=500, cooldown_s=1.0)  # fmt: skip
    await _enqueue(conn, RESTART_N)
    e = engine(db_url)
    worker = asyncio.create_task(e.run())
    restarted = False
    try:
        for _ in range(200):  # bounded: 20 s
            if (await queue.declare()).message_count >= RESTART_N // 5:
                break
            await asyncio.sleep(0.1)
        await mq.close()
        await _ctl("stop_app")
        restarted = True
        await asyncio.sleep(1.0)
        await _ctl("start_app")
        restarted = False
        for _ in range(600):  # bounded: 60 s
            if await statuses(conn) == {"delivered": RESTART_N}:
                break
            await asyncio.sleep(0.1)
    finally:
        if restarted:
            await _ctl("start_app")
        e.stop()
        await asyncio.wait_for(worker, 30)
    assert await statuses(conn) == {"delivered": RESTART_N}
    mq = await _connected()
    try:
        channel = await mq.channel()
        queue = await channel.declare_queue(name, durable=True)
        ids = []
        while (message := await queue.get(fail=False, no_ack=True)) is not None:
            ids.append((message.headers or {})["webhook-id"])
        assert len(set(ids)) == RESTART_N  # every confirmed message survived the restart
        assert len(ids) - RESTART_N <= IN_FLIGHT  # re-sent at most what was unconfirmed
        await queue.delete(if_unused=False, if_empty=False)
        await channel.exchange_delete(name)
    finally:
        await mq.close()
