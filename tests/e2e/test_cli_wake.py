"""`dispatcher wake`: prints the switch, sets it, refuses anything else in
one line with exit 2."""

from __future__ import annotations

import json

import asyncpg

from tests.helpers import cli


async def test_wake_prints_and_sets_the_switch(conn: asyncpg.Connection, db_url: str) -> None:
    code, out, err = await cli(db_url, "wake")
    assert (code, err) == (0, "")
    assert out.startswith("wake probe (since ")

    code, out, err = await cli(db_url, "wake", "notify", "--json")
    assert (code, err) == (0, "")
    doc = json.loads(out)
    assert doc["wake"] == "notify" and doc["updated_at"]
    assert await conn.fetchval("SELECT wake FROM dispatcher_settings") == "notify"

    code, out, _ = await cli(db_url, "wake", "--json")
    assert json.loads(out) == doc

    code, out, err = await cli(db_url, "wake", "sometimes")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "invalid choice: 'sometimes'" in err

    code, out, _ = await cli(db_url, "wake", "probe")
    assert code == 0 and out.startswith("wake probe (since ")
    assert await conn.fetchval("SELECT wake FROM dispatcher_settings") == "probe"
