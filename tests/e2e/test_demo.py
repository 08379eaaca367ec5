"""`dispatcher demo` tells its story end to end."""

from __future__ import annotations

import uuid

import asyncpg

from tests.helpers import cli


async def test_demo_story(server_url: str) -> None:
    name = f"dispatcher_demo_{uuid.uuid4().hex[:8]}"
    try:
        code, out, err = await cli(server_url, "demo", "--events", "80", "--database", name,
                                   timeout=120)  # fmt: skip
    finally:
        conn = await asyncpg.connect(server_url)
        await conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        await conn.close()
    assert code == 0, err[-2000:]
    assert "Traceback" not in err
    assert "dashboard: http://127.0.0.1:" in out
    assert "broken   closed -> open" in out and "half_open -> closed" in out
    assert "status-code" in out and "401" in out
    assert "p95_ms" in out and "delivered_last_hour" in out
