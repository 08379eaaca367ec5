"""Destinations beyond HTTP (issue 33, SPEC "Destinations"): RabbitMQ,
NATS JetStream and Redis Streams, against the servers these machines run
(5672, 4222, 6379). Each delivery reaches the broker with the body an HTTP
receiver would get and headers a Standard Webhooks verifier accepts; what
the broker cannot take is dead-lettered at once with its word (unroutable,
auth); a broker's password is sealed at rest and shown masked."""

from __future__ import annotations

import asyncio
import json
import signal
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aio_pika
import asyncpg
import nats
import pytest
import redis.asyncio
import redis.exceptions
from standardwebhooks import Webhook

from dispatcher.core.destinations import open_url
from dispatcher.core.errors import BadInput
from dispatcher.core.models import EndpointSpec
from dispatcher.core.secretbox import SecretBox
from dispatcher.db import catalog
from dispatcher.ops import endpoints as ops_endpoints
from dispatcher.ops.inputs import spec_from_fields
from dispatcher.settings import Settings
from tests.helpers import add_endpoint, drain, engine, free_port, statuses

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
N = 20


async def _enqueue(conn: asyncpg.Connection, n: int, event_type: str = "order.paid") -> list[str]:
    ids = [f"evt_{uuid.uuid4().hex[:10]}_{i}" for i in range(n)]
    for i, event_id in enumerate(ids):
        await conn.fetchval(
            "SELECT dispatcher_enqueue($1, $2::json, $3)",
            event_type, json.dumps({"n": i, "id": event_id}), event_id,
        )  # fmt: skip
    return ids


def _verified(body: bytes, headers: dict[str, str]) -> dict[str, object]:
    """What a receiver's own Standard Webhooks code does with the message."""
    doc: dict[str, object] = Webhook(SECRET).verify(body, headers)
    return doc


async def test_rabbitmq_gets_every_event_confirmed_persistent_and_signed(
    db_url: str, conn: asyncpg.Connection
) -> None:
    queue_name = f"dispatcher-test-{uuid.uuid4().hex[:8]}"
    mq = await aio_pika.connect("amqp://guest:guest@127.0.0.1:5672/")
    try:
        channel = await mq.channel()
        exchange = await channel.declare_exchange(queue_name, aio_pika.ExchangeType.DIRECT)
        queue = await channel.declare_queue(queue_name, durable=True)
        await queue.bind(exchange, routing_key="paid")
        url = f"amqp://guest:guest@127.0.0.1:5672/?exchange={queue_name}&routing_key=paid"
        await add_endpoint(conn, url, secret=SECRET)
        ids = await _enqueue(conn, N)
        await drain(db_url)
        assert await statuses(conn) == {"delivered": N}
        got = []
        for _ in range(N):
            message = await queue.get(timeout=5)
            await message.ack()
            headers = {k: str(v) for k, v in (message.headers or {}).items()}
            assert _verified(message.body, headers)["id"] == headers["webhook-id"]
            assert headers["event-type"] == "order.paid"
            assert message.delivery_mode == aio_pika.DeliveryMode.PERSISTENT
            assert message.content_type == "application/json"
            assert headers["content-type"] == "application/json"
            assert message.message_id == headers["webhook-id"] and message.type == "order.paid"
            assert message.timestamp is not None
            assert message.timestamp.timestamp() == int(headers["webhook-timestamp"])
            got.append(headers["webhook-id"])
        assert sorted(got) == sorted(ids)
        assert await queue.get(fail=False) is None  # exactly once each
        await queue.delete(if_unused=False, if_empty=False)
        await exchange.delete()
    finally:
        await mq.close()


async def test_rabbitmq_unroutable_and_refused_credentials_are_dead_at_once(
    db_url: str, conn: asyncpg.Connection
) -> None:
    name = f"dispatcher-test-{uuid.uuid4().hex[:8]}"
    mq = await aio_pika.connect("amqp://guest:guest@127.0.0.1:5672/")
    try:
        channel = await mq.channel()
        exchange = await channel.declare_exchange(name, aio_pika.ExchangeType.DIRECT)
        unbound, _ = await add_endpoint(
            conn, f"amqp://guest:guest@127.0.0.1/?exchange={name}&routing_key=nobody",
            event_types=("a",),
        )  # fmt: skip
        missing, _ = await add_endpoint(
            conn, f"amqp://guest:guest@127.0.0.1/?exchange={name}-absent&routing_key=k",
            event_types=("b",),
        )  # fmt: skip
        refused, _ = await add_endpoint(
            conn, f"amqp://guest:wrong@127.0.0.1/?exchange={name}&routing_key=k",
            event_types=("c",),
        )  # fmt: skip
        for kind in ("a", "b", "c"):
            await _enqueue(conn, 2, kind)
        await drain(db_url)
        rows = await conn.fetch(
            "SELECT endpoint_id, status, attempt_count, last_error FROM webhook_queue"
        )
        errors = {r["endpoint_id"]: r["last_error"] for r in rows}
        assert {r["status"] for r in rows} == {"dead_letter"}, [dict(r) for r in rows]
        assert {r["attempt_count"] for r in rows} == {1}  # permanent: not retried
        assert errors[unbound].startswith("unroutable")
        assert errors[missing].startswith("unroutable")
        assert errors[refused].startswith("auth")
        await exchange.delete()
    finally:
        await mq.close()


async def test_jetstream_acknowledges_each_event_once_by_its_msg_id(
    db_url: str, conn: asyncpg.Connection
) -> None:
    stream = f"DT{uuid.uuid4().hex[:8]}"
    subject = f"{stream.lower()}.paid"
    nc = await nats.connect("nats://127.0.0.1:4222")
    try:
        js = nc.jetstream()
        await js.add_stream(name=stream, subjects=[subject])
        await add_endpoint(conn, f"nats://127.0.0.1:4222/{subject}", secret=SECRET,
                           event_types=("order.paid",))  # fmt: skip
        await add_endpoint(conn, "nats://127.0.0.1:4222/nobody.listens", event_types=("x",))
        ids = await _enqueue(conn, N)
        await _enqueue(conn, 1, "x")
        await drain(db_url)
        counts = await statuses(conn)
        assert counts == {"delivered": N, "dead_letter": 1}
        dead = await conn.fetchval(
            "SELECT last_error FROM webhook_queue WHERE status = 'dead_letter'"
        )
        assert dead.startswith("unroutable")
        info = await js.stream_info(stream)
        assert info.state.messages == N
        got = []
        for seq in range(1, N + 1):
            msg = await js.get_msg(stream, seq)
            headers = dict(msg.headers or {})
            assert headers["Nats-Msg-Id"] == headers["webhook-id"]
            assert _verified(msg.data or b"", headers)["id"] == headers["webhook-id"]
            assert headers["content-type"] == "application/json"
            got.append(headers["webhook-id"])
        assert sorted(got) == sorted(ids)
        # A re-send of a delivery (its acknowledgement lost) is dropped by
        # the stream: same Nats-Msg-Id, within its duplicate window.
        again = await js.publish(subject, b"{}", headers={"Nats-Msg-Id": ids[0]})
        assert again.duplicate
        await js.delete_stream(stream)
    finally:
        await nc.close()


async def test_redis_stream_entries_carry_the_body_and_signed_fields(
    db_url: str, conn: asyncpg.Connection
) -> None:
    key = f"dispatcher-test-{uuid.uuid4().hex[:8]}"
    r = redis.asyncio.Redis(host="127.0.0.1", port=6379)
    try:
        # A body shape shapes HTTP requests only: the stream gets the JSON,
        # and says so, as for any endpoint.
        await add_endpoint(conn, f"redis://127.0.0.1:6379/0?stream={key}&maxlen=1000",
                           secret=SECRET, event_types=("order.paid",), body="form")  # fmt: skip
        await r.set(f"{key}-string", "not a stream")
        await add_endpoint(conn, f"redis://127.0.0.1:6379/0?stream={key}-string",
                           event_types=("x",))  # fmt: skip
        ids = await _enqueue(conn, N)
        await _enqueue(conn, 1, "x")
        await drain(db_url)
        assert await statuses(conn) == {"delivered": N, "dead_letter": 1}
        dead = await conn.fetchval(
            "SELECT last_error FROM webhook_queue WHERE status = 'dead_letter'"
        )
        assert dead.startswith("unroutable")
        entries = await r.xrange(key)
        assert len(entries) == N
        got = []
        for _, fields in entries:
            headers = {k.decode(): v.decode() for k, v in fields.items() if k != b"body"}
            assert _verified(fields[b"body"], headers)["id"] == headers["webhook-id"]
            assert headers["event-type"] == "order.paid"
            assert headers["content-type"] == "application/json"
            got.append(headers["webhook-id"])
        assert sorted(got) == sorted(ids)
    finally:
        await r.delete(key, f"{key}-string")
        await r.aclose()


async def test_a_broker_endpoints_rate_limit_holds(db_url: str, conn: asyncpg.Connection) -> None:
    """The endpoint's token bucket applies to a broker as to HTTP: 31 events
    at 20/s with a burst of 1 span at least 1.5 s of the broker's own clock
    (Redis stamps each entry's id with its milliseconds). A lower bound:
    a slow machine only makes it longer."""
    key = f"dispatcher-test-{uuid.uuid4().hex[:8]}"
    r = redis.asyncio.Redis(host="127.0.0.1", port=6379)
    try:
        await add_endpoint(conn, f"redis://127.0.0.1:6379/0?stream={key}", rate_per_s=20,
                           burst=1)  # fmt: skip
        await _enqueue(conn, 31)
        await drain(db_url)
        assert await statuses(conn) == {"delivered": 31}
        stamps = [int(entry_id.split(b"-")[0]) for entry_id, _ in await r.xrange(key)]
        assert len(stamps) == 31
        assert stamps[-1] - stamps[0] >= 1500 * 0.95, stamps  # 30 tokens at 20/s
    finally:
        await r.delete(key)
        await r.aclose()


async def test_a_refused_broker_is_retried_not_lost(db_url: str, conn: asyncpg.Connection) -> None:
    # Nothing listens on port 1: connection refused, a transient failure.
    await add_endpoint(conn, "redis://127.0.0.1:1/0?stream=s", max_attempts=2, retry_base_ms=10,
                       retry_cap_ms=20)  # fmt: skip
    await _enqueue(conn, 1)
    # A drain leaves a retry that is not due yet (SPEC: it does not hold the
    # drain), and 10-20 ms of backoff can outlast the flush and the next
    # claim: drain again until the second attempt has been made.
    for _ in range(100):
        await drain(db_url)
        row = await conn.fetchrow("SELECT status, attempt_count, last_error FROM webhook_queue")
        if row["status"] != "failed":
            break
        await asyncio.sleep(0.02)
    assert row["status"] == "dead_letter" and row["attempt_count"] == 2, row
    assert row["last_error"].startswith("connection refused"), row


async def test_a_broker_password_is_sealed_at_rest_and_shown_masked(
    conn: asyncpg.Connection,
) -> None:
    box = SecretBox("destinations-test-key")
    policy = Settings(allow_private_targets=True).target_policy()
    url = "amqp://app:s3cret@127.0.0.1:5672/orders?exchange=events&routing_key=paid"
    shown = await ops_endpoints.add_endpoint(conn, EndpointSpec(url=url), box=box,
                                                targets=policy)  # fmt: skip
    assert shown["url"] == "amqp://app:****@127.0.0.1:5672/orders?exchange=events&routing_key=paid"
    assert shown["kind"] == "amqp"
    stored = await conn.fetchval("SELECT url FROM endpoints WHERE id = $1", shown["id"])
    assert "s3cret" not in stored
    # An update that sends the shown URL back keeps the password.
    await ops_endpoints.update_endpoint(conn, shown["id"], {"url": shown["url"], "timeout_ms": 900},
                                      box=box, targets=policy)  # fmt: skip
    record = await catalog.get_endpoint(conn, shown["id"])
    assert open_url(box, record.url) == url
    # A tenant may publish only to brokers the operator lists.
    with pytest.raises(Exception, match="DISPATCHER_BROKERS_ALLOWED"):
        await ops_endpoints.add_endpoint(conn, EndpointSpec(url=url), box=box, targets=policy,
                                            app="default", charged=True)  # fmt: skip


# ------------------------------------------------------------ broker restarts


async def _server(
    argv: list[str], port: int, started: list[asyncio.subprocess.Process]
) -> asyncio.subprocess.Process:
    """`argv` listening on `port`; kept in `started`, which the test kills
    whatever happens."""
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
    )
    started.append(proc)
    for _ in range(100):  # bounded: 10 s
        try:
            _, w = await asyncio.open_connection("127.0.0.1", port)
            w.close()
            return proc
        except OSError:
            await asyncio.sleep(0.1)
    proc.kill()
    raise AssertionError(f"{argv[0]} did not listen on {port}")


async def _killed(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.send_signal(signal.SIGKILL)
        await proc.wait()


async def _across_a_restart(
    db_url: str,
    conn: asyncpg.Connection,
    url: str,
    start: Callable[[], Awaitable[asyncio.subprocess.Process]],
    count: Callable[[], Awaitable[int]],
    proc: asyncio.subprocess.Process,
) -> asyncio.subprocess.Process:
    """RESTART_N events at 300/s to `url`; the broker SIGKILLed once some
    have arrived and started again a second later; returns the new process
    once the worker delivered them all."""
    await add_endpoint(conn, url, secret=SECRET, rate_per_s=300.0, max_in_flight=IN_FLIGHT,
                       max_attempts=30, retry_base_ms=100, retry_cap_ms=500,
                       cooldown_s=1.0)  # fmt: skip
    await _enqueue(conn, RESTART_N)
    # Not a drain: the breaker opens while the broker is down, and a drain
    # ends when nothing is claimable. The worker runs until all is delivered.
    e = engine(db_url)
    worker = asyncio.create_task(e.run())
    try:
        for _ in range(200):  # bounded: 20 s
            if await count() >= RESTART_N // 5:
                break
            await asyncio.sleep(0.1)
        await _killed(proc)
        await asyncio.sleep(1.0)
        proc = await start()
        for _ in range(600):  # bounded: 60 s
            if await statuses(conn) == {"delivered": RESTART_N}:
                break
            await asyncio.sleep(0.1)
    finally:
        e.stop()
        await asyncio.wait_for(worker, 30)
    left = await conn.fetch(
        "SELECT status, attempt_count, last_error, next_attempt_at - now() AS due"
        " FROM webhook_live WHERE status <> 'delivered'"
    )
    assert await statuses(conn) == {"delivered": RESTART_N}, [dict(r) for r in left]
    return proc


RESTART_N = 600
IN_FLIGHT = 10


async def test_a_redis_restart_mid_run_loses_nothing(
    db_url: str, conn: asyncpg.Connection, tmp_path: Path
) -> None:
    port = free_port()
    argv = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
            "--appendonly", "yes", "--appendfsync", "always", "--dir", str(tmp_path)]  # fmt: skip

    started: list[asyncio.subprocess.Process] = []

    async def start() -> asyncio.subprocess.Process:
        return await _server(argv, port, started)

    proc = await start()
    r = redis.asyncio.Redis(host="127.0.0.1", port=port)

    async def count() -> int:
        try:
            return int(await r.xlen("s"))
        except redis.exceptions.ConnectionError:
            return 0

    try:
        proc = await _across_a_restart(db_url, conn, f"redis://127.0.0.1:{port}/0?stream=s",
                                       start, count, proc)  # fmt: skip
        entries = await r.xrange("s")
        ids = [fields[b"webhook-id"] for _, fields in entries]
        assert len(set(ids)) == RESTART_N  # every event, from disk after the restart
        assert len(ids) - RESTART_N <= IN_FLIGHT  # re-sent at most what was unconfirmed
    finally:
        await r.aclose()
        for p in started:
            await _killed(p)


async def test_a_nats_restart_mid_run_loses_nothing_and_stores_each_once(
    db_url: str, conn: asyncpg.Connection, tmp_path: Path
) -> None:
    port = free_port()
    argv = ["nats-server", "-a", "127.0.0.1", "-p", str(port), "-js", "-sd", str(tmp_path)]

    started: list[asyncio.subprocess.Process] = []

    async def start() -> asyncio.subprocess.Process:
        return await _server(argv, port, started)

    proc = await start()
    nc = await nats.connect(f"nats://127.0.0.1:{port}")
    await nc.jetstream().add_stream(name="R", subjects=["r.paid"])
    await nc.close()
    box: dict[str, Any] = {}

    async def count() -> int:
        try:
            if box.get("nc") is None or box["nc"].is_closed:
                box["nc"] = await nats.connect(f"nats://127.0.0.1:{port}", allow_reconnect=False)
            return int((await box["nc"].jetstream().stream_info("R")).state.messages)
        except Exception:  # the server is down: nothing countable now
            box["nc"] = None
            return 0

    try:
        proc = await _across_a_restart(db_url, conn, f"nats://127.0.0.1:{port}/r.paid",
                                       start, count, proc)  # fmt: skip
        # Nats-Msg-Id: a re-send after a lost PubAck is dropped by the stream.
        assert await count() == RESTART_N
    finally:
        if box.get("nc") is not None:
            await box["nc"].close()
        for p in started:
            await _killed(p)


async def test_a_nats_token_authenticates_and_a_wrong_one_is_refused(
    db_url: str, conn: asyncpg.Connection, tmp_path: Path
) -> None:
    """`nats://:TOKEN@host`: the token in the password place (sealed and
    masked as a password), sent as NATS token authentication."""
    port = free_port()
    token = "tok-" + uuid.uuid4().hex
    argv = ["nats-server", "-a", "127.0.0.1", "-p", str(port), "-js", "-sd", str(tmp_path),
            "--auth", token]  # fmt: skip
    started: list[asyncio.subprocess.Process] = []
    try:
        await _server(argv, port, started)
        nc = await nats.connect(f"nats://127.0.0.1:{port}", token=token)
        try:
            await nc.jetstream().add_stream(name="T", subjects=["t.paid", "t.bad"])
            await add_endpoint(conn, f"nats://:{token}@127.0.0.1:{port}/t.paid",
                               event_types=("order.paid",))  # fmt: skip
            wrong, _ = await add_endpoint(conn, f"nats://:nope@127.0.0.1:{port}/t.bad",
                                          event_types=("x",))  # fmt: skip
            await _enqueue(conn, 3)
            await _enqueue(conn, 1, "x")
            await drain(db_url)
            assert await statuses(conn) == {"delivered": 3, "dead_letter": 1}
            dead = await conn.fetchval(
                "SELECT last_error FROM webhook_queue WHERE endpoint_id = $1", wrong
            )
            assert dead.startswith("auth")
            assert (await nc.jetstream().stream_info("T")).state.messages == 3
        finally:
            await nc.close()
        # NATS's own TOKEN@ form would keep the token unsealed and unmasked.
        with pytest.raises(BadInput, match="password would"):
            spec_from_fields({"url": f"nats://{token}@127.0.0.1:{port}/t.paid"})
    finally:
        for p in started:
            await _killed(p)


async def test_jetstream_refusals_and_oversized_messages_in_our_words() -> None:
    """The pipelined publish (brokers/nats.py) reads each PubAck itself: a
    stream that refuses the message is a transient nack with its code; a
    message over the server's max_payload and a header name NATS cannot
    carry are permanent; an accepted one says nothing."""
    from dispatcher.core.destinations import parse_broker
    from dispatcher.worker.brokers import nats as nats_link
    from dispatcher.worker.brokers.link import BrokerFailure, BrokerMessage

    stream = f"DR{uuid.uuid4().hex[:8]}"
    subject = f"{stream.lower()}.full"
    nc = await nats.connect("nats://127.0.0.1:4222")
    js = nc.jetstream()
    await js.add_stream(name=stream, subjects=[subject], max_msgs=1, discard="new")
    target = parse_broker(f"nats://127.0.0.1:4222/{subject}")
    link = await nats_link.connect(target, "127.0.0.1", None)

    def message(n: int, body: bytes = b"{}", **headers: str) -> BrokerMessage:
        return BrokerMessage(body, {"webhook-id": f"m{n}", **headers}, f"m{n}", "t", 0)

    try:
        await link.publish(target, message(1))
        with pytest.raises(BrokerFailure) as refused:
            await link.publish(target, message(2))
        assert refused.value.word.startswith("nack: the stream refused it (code 10077)")
        assert not refused.value.permanent
        with pytest.raises(BrokerFailure) as big:
            await link.publish(target, message(3, b"x" * (nc.max_payload + 1)))
        assert big.value.permanent and "max_payload" in big.value.word
        with pytest.raises(BrokerFailure) as named:
            await link.publish(target, message(4, **{"bad name": "v"}))
        assert named.value.permanent
        # Together, from one turn of the loop: each answered on its own.
        await js.purge_stream(stream)
        results = await asyncio.gather(*(link.publish(target, message(n)) for n in (5, 6, 7)),
                                       return_exceptions=True)  # fmt: skip
        assert sum(r is None for r in results) == 1
        assert (await js.stream_info(stream)).state.messages == 1
    finally:
        await link.close()
        await js.delete_stream(stream)
        await nc.close()
