"""Fault isolation is a property: whatever one endpoint's row holds, the worker
delivers everything else, dead-letters that endpoint's deliveries with a clear
last_error, and says once which endpoint and why."""

from __future__ import annotations

import logging

import asyncpg
import pytest

from dispatcher.core.errors import OperationalError
from dispatcher.core.secretbox import SecretBox
from dispatcher.db import catalog
from tests.helpers import add_endpoint, drain, statuses
from tests.receivers import Receiver

# column, SQL value: rows written by hand, by an older version, or sealed
# with a key this worker does not have.
BROKEN = [
    ("url", "'http://xn--zz.example/hook'"),
    ("url", "'not a url'"),
    ("url", "'http://[::1/x'"),
    ("url", "''"),
    ("secret", "'enc:v1:AAAA'"),
    ("secret", "'whsec_!!!'"),
    ("secret", "'garbage'"),
    ("headers", """'[1, 2]'::jsonb"""),
    ("headers", """'"text"'::jsonb"""),
    ("headers", """'{"X-A": 5}'::jsonb"""),
    ("headers", """jsonb_build_object('X-A', E'a\\r\\nb')"""),
    ("headers", """'{"webhook-signature": "v1,forged"}'::jsonb"""),
]
# Odd but valid (the ends of each range): these must simply work.
ODD = [
    ("rate_per_s", "100000"),
    ("max_in_flight", "10000"),
    ("timeout_ms", "300000"),
    ("cooldown_s", "86400"),
    ("burst", "100000"),
    ("event_types", "'{}'"),
]
# Out of range: refused by the schema's CHECK constraints; written anyway
# (the constraints dropped, as by an older release or a hand edit), the row
# is set aside and the worker goes on.
OUT_OF_RANGE = [
    ("rate_per_s", "1e300"),
    ("rate_per_s", "1e-300"),
    ("rate_per_s", "'NaN'"),
    ("rate_per_s", "'Infinity'"),
    ("burst", "2147483647"),
    ("max_in_flight", "2147483647"),
    ("timeout_ms", "2147483647"),
    ("timeout_ms", "1"),
    ("max_attempts", "1000"),
    ("retry_cap_ms", "2147483647"),
    ("failure_threshold", "100000"),
    ("cooldown_s", "1e308"),
    ("cooldown_s", "0.001"),
]

KEY = "the worker's key"


async def _setup(conn: asyncpg.Connection, receiver: Receiver, column: str, value: str) -> int:
    good, secret = await add_endpoint(conn, receiver.url("/good"))
    bad, _ = await add_endpoint(conn, receiver.url("/bad"))
    # The good endpoint's secret sealed with the worker's key: the bad row's
    # sealed value is then one row gone wrong, not a worker without its key.
    await conn.execute(
        "UPDATE endpoints SET secret = $2 WHERE id = $1", good, SecretBox(KEY).seal(secret)
    )
    await conn.execute(f"UPDATE endpoints SET {column} = {value} WHERE id = $1", bad)
    events = [(f"g{i}", "t", "{}", good) for i in range(20)]
    events += [(f"b{i}", "t", "{}", bad) for i in range(3)]
    await catalog.enqueue_bulk(conn, events)
    return bad


@pytest.mark.parametrize(("column", "value"), BROKEN)
async def test_one_broken_endpoint_never_stops_the_rest(
    conn: asyncpg.Connection,
    db_url: str,
    receiver: Receiver,
    caplog: pytest.LogCaptureFixture,
    column: str,
    value: str,
) -> None:
    bad = await _setup(conn, receiver, column, value)
    with caplog.at_level(logging.INFO, logger="dispatcher"):
        await drain(db_url, secret_key=KEY)
    assert len(receiver.requests_to("/good")) == 20
    rows = await conn.fetch(
        "SELECT status, last_error FROM webhook_queue WHERE endpoint_id = $1", bad
    )
    assert [r["status"] for r in rows] == ["dead_letter"] * 3
    assert all(r["last_error"] for r in rows)
    said = [r for r in caplog.records if r.getMessage() == "endpoint_broken"]
    refused = all("refused" in r["last_error"] for r in rows)
    assert refused or [getattr(r, "fields", {}).get("endpoint_id") for r in said] == [bad]
    assert (await statuses(conn)) == {"delivered": 20, "dead_letter": 3}


@pytest.mark.parametrize(("column", "value"), ODD)
async def test_odd_but_valid_settings_still_deliver(
    conn: asyncpg.Connection, db_url: str, receiver: Receiver, column: str, value: str
) -> None:
    bad = await _setup(conn, receiver, column, value)
    await drain(db_url, secret_key=KEY)
    assert len(receiver.requests_to("/good")) == 20
    left = await conn.fetchval(
        "SELECT count(*) FROM webhook_queue WHERE endpoint_id = $1 AND status <> 'delivered'", bad
    )
    assert left == 0


@pytest.mark.parametrize(("column", "value"), OUT_OF_RANGE)
async def test_out_of_range_settings_are_refused_by_the_schema(
    conn: asyncpg.Connection, column: str, value: str
) -> None:
    eid = await conn.fetchval(
        "INSERT INTO endpoints (url, secret) VALUES ('http://x', 's') RETURNING id"
    )
    with pytest.raises(asyncpg.CheckViolationError, match=f"endpoints_{column}_range"):
        await conn.execute(f"UPDATE endpoints SET {column} = {value} WHERE id = $1", eid)


@pytest.mark.parametrize(("column", "value"), OUT_OF_RANGE)
async def test_out_of_range_settings_set_the_endpoint_aside(
    conn: asyncpg.Connection, db_url: str, receiver: Receiver, column: str, value: str
) -> None:
    await conn.execute(f"ALTER TABLE endpoints DROP CONSTRAINT endpoints_{column}_range")
    bad = await _setup(conn, receiver, column, value)
    await drain(db_url, secret_key=KEY)
    assert len(receiver.requests_to("/good")) == 20
    assert receiver.requests_to("/bad") == []
    errors = await conn.fetch(
        "SELECT status, last_error FROM webhook_queue WHERE endpoint_id = $1", bad
    )
    assert [(r["status"], r["last_error"].split(" must")[0]) for r in errors] == [
        ("dead_letter", f"endpoint unusable: {column}")
    ] * 3


async def test_a_worker_whose_key_opens_no_secret_stops_loudly(
    conn: asyncpg.Connection, db_url: str, receiver: Receiver
) -> None:
    """Not one sealed secret opens: the worker's key is wrong (or missing).
    That is configuration, not a bad row: nothing is dead-lettered."""
    await _setup(conn, receiver, "url", "url")
    with pytest.raises(OperationalError, match="DISPATCHER_SECRET_KEY"):
        await drain(db_url, secret_key="another key")
    assert (await statuses(conn)) == {"pending": 23}


@pytest.mark.parametrize(
    ("column", "value"), [("method", "'DELETE'"), ("method", "'get'"), ("body", "'xml'")]
)
async def test_a_shape_outside_its_set_is_set_aside(
    conn: asyncpg.Connection, db_url: str, receiver: Receiver, column: str, value: str
) -> None:
    """Written around the schema's checks (an older release, a hand edit):
    never sent as some other method or body."""
    await conn.execute(f"ALTER TABLE endpoints DROP CONSTRAINT endpoints_{column}_check")
    bad = await _setup(conn, receiver, column, value)
    await drain(db_url, secret_key=KEY)
    assert len(receiver.requests_to("/good")) == 20
    assert receiver.requests_to("/bad") == []
    errors = await conn.fetch("SELECT last_error FROM webhook_queue WHERE endpoint_id = $1", bad)
    assert [r[0] for r in errors] == ["endpoint unusable: method, body or ordering invalid"] * 3
