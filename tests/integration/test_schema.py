"""The schema agrees with the code about endpoint defaults."""

from __future__ import annotations

import asyncpg
import orjson

from dispatcher.core.models import SETTING_NAMES, EndpointSettings


async def test_endpoint_column_defaults_match_endpoint_settings(conn: asyncpg.Connection) -> None:
    """Rows inserted by hand (SQL, a migration) get the same settings as
    endpoints created through dispatcher, which take EndpointSettings'."""
    rows = await conn.fetch(
        "SELECT column_name, column_default, is_nullable FROM information_schema.columns"
        " WHERE table_schema = current_schema() AND table_name = 'endpoints'"
    )
    columns = {r["column_name"]: r for r in rows}
    defaults = EndpointSettings()
    for name in SETTING_NAMES:
        expr = columns[name]["column_default"]
        value = None if expr is None else await conn.fetchval(f"SELECT ({expr})")
        if name == "event_types":
            value = tuple(value)
        elif name == "headers":
            value = tuple(orjson.loads(value).items())
        expected = getattr(defaults, name)
        assert value == expected, (name, expr, expected)
        if expected is None:
            assert columns[name]["is_nullable"] == "YES", name
