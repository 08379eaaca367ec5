"""`dispatcher demo` tells its story end to end."""

from __future__ import annotations

from tests.helpers import cli


async def test_demo_story(server_url: str) -> None:
    code, out, err = await cli(server_url, "demo", "--events", "80", timeout=120)
    assert code == 0, err[-2000:]
    assert "Traceback" not in err
    assert "dashboard: http://127.0.0.1:" in out
    assert "broken   closed -> open" in out and "half_open -> closed" in out
    assert "status-code" in out and "401" in out
    assert "p95_ms" in out and "delivered_last_hour" in out
