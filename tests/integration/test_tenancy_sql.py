"""Applications in SQL (schema 008): `dispatcher_enqueue_app` on a real
connection, `dispatcher_enqueue` staying the default application's, event
ids unique per application (also under concurrency), and the migration
that puts every existing endpoint into `default`."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from dispatcher import db
from tests.helpers import add_endpoint
from tests.releases import build_release

ENQUEUE_APP = "SELECT dispatcher_enqueue_app($1, $2, $3::json, $4, $5)"
ENQUEUE = "SELECT dispatcher_enqueue($1, $2::json, $3)"
ROWS = "SELECT count(*) FROM webhook_queue"


async def two_apps(conn: asyncpg.Connection) -> dict[str, list[int]]:
    """acme and globex with two endpoints each, default with one; all take every type."""
    await conn.execute("INSERT INTO applications (id, name) VALUES ('acme', 'A'), ('globex', 'G')")
    out: dict[str, list[int]] = {}
    for app, n in (("acme", 2), ("globex", 2), ("default", 1)):
        for i in range(n):
            eid, _ = await add_endpoint(conn, f"https://{app}.example/{i}")
            await conn.execute("UPDATE endpoints SET application_id = $1 WHERE id = $2", app, eid)
            out.setdefault(app, []).append(eid)
    return out


async def endpoints_of(conn: asyncpg.Connection, ids: list[int]) -> list[int]:
    rows = await conn.fetch(
        "SELECT endpoint_id FROM webhook_queue WHERE id = ANY($1::bigint[]) ORDER BY id", ids
    )
    return [r[0] for r in rows]


async def test_an_unknown_application_raises_and_inserts_nothing(
    conn: asyncpg.Connection,
) -> None:
    await two_apps(conn)
    for endpoint in (None, 1):
        with pytest.raises(asyncpg.InvalidParameterValueError, match="unknown application: nope"):
            await conn.fetchval(ENQUEUE_APP, "nope", "t", "{}", "e1", endpoint)
    assert await conn.fetchval(ROWS) == 0
    # A known application without endpoints: nothing to do, and no error.
    await conn.execute("INSERT INTO applications (id, name) VALUES ('empty', 'E')")
    assert await conn.fetchval(ENQUEUE_APP, "empty", "t", "{}", "e1", None) == []


async def test_a_deleted_application_is_unknown(conn: asyncpg.Connection) -> None:
    await conn.execute("INSERT INTO applications (id, name) VALUES ('gone', 'G')")
    await conn.execute("UPDATE applications SET deleted_at = now() WHERE id = 'gone'")
    with pytest.raises(asyncpg.InvalidParameterValueError, match="unknown application: gone"):
        await conn.fetchval(ENQUEUE_APP, "gone", "t", "{}", "e1", None)
    assert await conn.fetchval(ROWS) == 0


@pytest.mark.parametrize(
    "call",
    [
        "SELECT dispatcher_enqueue_app('acme', 't', $1::jsonb, 'e1', hold => true)",
        "SELECT dispatcher_enqueue_app('acme', 't', $1::text, 'e1', hold => true)",
        "SELECT dispatcher_enqueue_app('acme', 't', $1::json, 'e1', hold => true)",
    ],
)
async def test_enqueue_app_takes_json_jsonb_and_text_with_named_arguments(
    conn: asyncpg.Connection, call: str
) -> None:
    apps = await two_apps(conn)
    ids = await conn.fetchval(call, '{"q": 1}')
    assert await endpoints_of(conn, ids) == apps["acme"]
    rows = await conn.fetch("SELECT status, payload FROM webhook_queue ORDER BY id")
    assert {(r["status"], r["payload"].replace(" ", "")) for r in rows} == {("held", '{"q":1}')}
    # An untyped literal still resolves (to the text form).
    more = await conn.fetchval(
        "SELECT dispatcher_enqueue_app('acme', 't', '{\"q\": 2}', 'e2', deliver_at => now())"
    )
    assert len(more) == 2


async def test_another_applications_endpoint_by_id_raises(conn: asyncpg.Connection) -> None:
    apps = await two_apps(conn)
    with pytest.raises(asyncpg.InvalidParameterValueError, match="not in application acme"):
        await conn.fetchval(ENQUEUE_APP, "acme", "t", "{}", "e1", apps["globex"][0])
    assert await conn.fetchval(ROWS) == 0
    # Its own endpoint by id: that endpoint only.
    ids = await conn.fetchval(ENQUEUE_APP, "acme", "t", "{}", "e1", apps["acme"][1])
    assert await endpoints_of(conn, ids) == [apps["acme"][1]]


async def test_an_application_fans_out_to_its_own_endpoints_only(
    conn: asyncpg.Connection,
) -> None:
    apps = await two_apps(conn)
    ids = await conn.fetchval(ENQUEUE_APP, "acme", "t", "{}", "e1", None)
    assert await endpoints_of(conn, ids) == apps["acme"]


async def test_dispatcher_enqueue_goes_to_default_only(conn: asyncpg.Connection) -> None:
    apps = await two_apps(conn)
    ids = await conn.fetchval(ENQUEUE, "t", "{}", "e1")
    assert await endpoints_of(conn, ids) == apps["default"]
    assert await conn.fetchval(ROWS) == 1
    # Given an endpoint by id, that endpoint's application.
    ids = await conn.fetchval(
        "SELECT dispatcher_enqueue($1, $2::json, $3, $4)", "t", "{}", "e2", apps["globex"][1]
    )
    assert await endpoints_of(conn, ids) == [apps["globex"][1]]


async def test_event_ids_are_unique_per_application(conn: asyncpg.Connection) -> None:
    apps = await two_apps(conn)
    a = await conn.fetchval(ENQUEUE_APP, "acme", "t", "{}", "same", None)
    g = await conn.fetchval(ENQUEUE_APP, "globex", "t", "{}", "same", None)
    d = await conn.fetchval(ENQUEUE, "t", "{}", "same")
    assert await endpoints_of(conn, a) == apps["acme"]
    assert await endpoints_of(conn, g) == apps["globex"]
    assert await endpoints_of(conn, d) == apps["default"]
    assert await conn.fetchval(ROWS) == 5
    # Again in each: the same answer, nothing new.
    assert await conn.fetchval(ENQUEUE_APP, "acme", "t", "{}", "same", None) == a
    assert await conn.fetchval(ENQUEUE_APP, "globex", "t", "{}", "same", None) == g
    assert await conn.fetchval(ENQUEUE, "t", "{}", "same") == d
    assert await conn.fetchval(ROWS) == 5


async def test_one_event_id_from_two_connections_makes_one_set_of_deliveries(
    conn: asyncpg.Connection, db_url: str
) -> None:
    apps = await two_apps(conn)
    other = await asyncpg.connect(db_url)
    try:
        tx = conn.transaction()
        await tx.start()
        first = await conn.fetchval(ENQUEUE_APP, "acme", "t", "{}", "race", None)
        # The second call waits on the first one's uncommitted rows.
        second = asyncio.create_task(other.fetchval(ENQUEUE_APP, "acme", "t", "{}", "race", None))
        await asyncio.sleep(0.3)
        assert not second.done()
        await tx.commit()
        assert await asyncio.wait_for(second, 10) == first
        # Both at once, many times over, each with a fresh id.
        for n in range(20):
            a, b = await asyncio.gather(
                conn.fetchval(ENQUEUE_APP, "acme", "t", "{}", f"r{n}", None),
                other.fetchval(ENQUEUE_APP, "acme", "t", "{}", f"r{n}", None),
            )
            assert a == b and len(a) == 2
    finally:
        await other.close()
    assert await endpoints_of(conn, first) == apps["acme"]
    assert await conn.fetchval(ROWS) == 2 * 21


async def test_migration_008_puts_every_endpoint_into_default(empty_db_url: str) -> None:
    conn = await asyncpg.connect(empty_db_url)
    try:
        await build_release(conn, 7)
        for i in range(3):
            await conn.execute(
                "INSERT INTO endpoints (url, secret) VALUES ($1, 'whsec_x')",
                f"https://old.example/{i}",
            )
        await conn.fetchval(ENQUEUE, "t", "{}", "old")
        queue = await conn.fetch("SELECT * FROM webhook_queue ORDER BY id")

        assert (await db.migrate(conn))[0] == "008_applications.sql"

        apps = await conn.fetch("SELECT id, name FROM applications")
        assert [tuple(r) for r in apps] == [("default", "default")]
        owners = await conn.fetch("SELECT DISTINCT application_id FROM endpoints")
        assert [r[0] for r in owners] == ["default"]
        # The rows as they were, in the columns they had (later versions add some).
        columns = ", ".join(queue[0].keys())
        assert await conn.fetch(f"SELECT {columns} FROM webhook_queue ORDER BY id") == queue
        # The event id is the default application's: repeating it adds nothing.
        ids = await conn.fetchval(ENQUEUE, "t", "{}", "old")
        assert ids == [r["id"] for r in queue]

        # Nor did the later migrations add applications or endpoints.
        tables = "SELECT count(*) FROM applications UNION ALL SELECT count(*) FROM endpoints"
        assert [r[0] for r in await conn.fetch(tables)] == [1, 3]
        assert await db.migrate(conn) == []
        assert await db.migrations_current(conn)
    finally:
        await conn.close()
