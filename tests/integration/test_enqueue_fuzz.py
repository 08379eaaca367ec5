"""Random enqueue documents against a real database: refused cleanly or queued; nothing lost."""

from __future__ import annotations

import asyncio

import asyncpg
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from dispatcher.core.errors import BadInput
from dispatcher.ops import service
from tests.helpers import add_endpoint

values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=6,
)
docs = st.dictionaries(
    st.sampled_from(["event_type", "payload", "event_id", "endpoint", "extra"]), values, max_size=5
) | st.fixed_dictionaries(
    {"event_type": st.text(min_size=1, max_size=10), "payload": values},
    optional={"event_id": st.text(max_size=12), "endpoint": st.integers(-3, 3)},
)


async def test_random_events_never_crash_or_lose_rows(
    db_url: str, conn: asyncpg.Connection
) -> None:
    await add_endpoint(conn, "https://example.com/a")
    await add_endpoint(conn, "https://example.com/b", event_types=("x",))
    loop = asyncio.get_running_loop()
    worker = await asyncpg.connect(db_url)
    seen: list[int] = []

    @settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
    @given(docs)
    @example({"event_type": "a", "payload": 2**70})  # beyond what JSON encoders take
    @example({"event_type": "a", "payload": {"x": float("nan")}})
    @example({"event_type": "x", "payload": [], "event_id": "dup"})
    @example({"event_type": "x", "payload": [], "event_id": "dup"})
    @example({"event_type": "x", "payload": {}, "endpoint": 2**70})
    def check(doc: dict[str, object]) -> None:
        fut = asyncio.run_coroutine_threadsafe(one(doc), loop)
        fut.result(timeout=10)

    async def one(doc: dict[str, object]) -> None:
        before = await worker.fetchval("SELECT count(*) FROM webhook_queue")
        try:
            result = await service.enqueue_event(worker, doc)
        except BadInput as exc:
            assert "\n" not in str(exc)
            assert await worker.fetchval("SELECT count(*) FROM webhook_queue") == before
            return
        after = await worker.fetchval("SELECT count(*) FROM webhook_queue")
        assert after >= before and all(isinstance(i, int) for i in result["deliveries"])
        seen.append(after)

    try:
        await loop.run_in_executor(None, check)
    finally:
        await worker.close()
    assert seen, "some documents should have been accepted"
