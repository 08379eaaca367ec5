"""`dispatcher event-type …` and `enqueue` against the catalogue as a user
runs them: JSON documents, one-line errors with exit 2, nothing queued for
a payload its type refuses."""

from __future__ import annotations

import json
from pathlib import Path

import asyncpg

from tests.e2e.test_cli_apps import ok, one_line_error
from tests.helpers import cli

PAID = '{"type": "object", "properties": {"amount": {"type": "number"}}, "required": ["amount"]}'


async def test_add_list_archive(db_url: str, conn: asyncpg.Connection, tmp_path: Path) -> None:
    doc = await ok(db_url, "event-type", "add", "order.paid", "--description", "paid",
                   "--schema", PAID)  # fmt: skip
    assert isinstance(doc, dict) and doc["name"] == "order.paid" and doc["app"] is None
    assert doc["schema"] == json.loads(PAID) and doc["archived"] is False
    schema_file = tmp_path / "refund.json"
    schema_file.write_text('{"type": "object"}')
    await ok(db_url, "app", "add", "acme")
    doc = await ok(db_url, "event-type", "add", "refund", "--schema", str(schema_file),
                   "--app", "acme")  # fmt: skip
    assert isinstance(doc, dict) and doc["app"] == "acme" and doc["schema"] == {"type": "object"}

    listed = await ok(db_url, "event-type", "list", "--app", "acme")
    assert [(t["name"], t["app"]) for t in listed] == [("order.paid", None), ("refund", "acme")]  # type: ignore[union-attr]
    assert [t["name"] for t in await ok(db_url, "event-type", "list")] == ["order.paid"]  # type: ignore[union-attr]

    archived = await ok(db_url, "event-type", "archive", "order.paid")
    assert isinstance(archived, dict) and archived["archived"] is True
    assert await ok(db_url, "event-type", "list") == []
    assert len(await ok(db_url, "event-type", "list", "--include-archived")) == 1  # type: ignore[arg-type]
    err = one_line_error(await cli(db_url, "enqueue", "--event-type", "order.paid",
                                   "--payload", '{"amount": 1}'))  # fmt: skip
    assert "event type order.paid is archived" in err
    await ok(db_url, "event-type", "unarchive", "order.paid")
    code, out, _ = await cli(db_url, "event-type", "list")
    assert code == 0 and "order.paid" in out and "paid" in out


async def test_bad_input_exits_2(db_url: str, conn: asyncpg.Connection) -> None:
    assert "name" in one_line_error(await cli(db_url, "event-type", "add", "bad name"))
    assert "not valid JSON" in one_line_error(
        await cli(db_url, "event-type", "add", "t", "--schema", "{nope")
    )
    assert "$.type" in one_line_error(
        await cli(db_url, "event-type", "add", "t", "--schema", '{"type": "foo"}')
    )
    assert "cannot read" in one_line_error(
        await cli(db_url, "event-type", "add", "t", "--schema", "/no/such/file.json")
    )
    assert "no event type t" in one_line_error(await cli(db_url, "event-type", "archive", "t"))
    await ok(db_url, "event-type", "add", "t")
    assert "exists" in one_line_error(await cli(db_url, "event-type", "add", "t"))
    assert await conn.fetchval("SELECT count(*) FROM event_types") == 1


async def test_enqueue_refuses_a_mismatch(
    db_url: str, conn: asyncpg.Connection, tmp_path: Path
) -> None:
    await ok(db_url, "endpoint", "add", "--url", "http://127.0.0.1:9/hook")
    await ok(db_url, "event-type", "add", "order.paid", "--schema", PAID)
    err = one_line_error(await cli(db_url, "enqueue", "--event-type", "order.paid",
                                   "--payload", '{"amount": "x"}'))  # fmt: skip
    assert err.strip() == (
        "dispatcher: error: payload does not match event type order.paid's schema at "
        "$.amount: 'x' is not of type 'number'"
    )
    events = tmp_path / "events.jsonl"
    good = '{"event_type": "order.paid", "payload": {"amount": 1}}'
    events.write_text(good + '\n{"event_type": "order.paid", "payload": {}, "event_id": "e2"}\n')
    err = one_line_error(await cli(db_url, "enqueue", "--file", str(events)))
    assert "event e2: payload does not match" in err
    assert await conn.fetchval("SELECT count(*) FROM webhook_queue") == 0
    done = await ok(db_url, "enqueue", "--event-type", "order.paid", "--payload", '{"amount": 2}')
    assert isinstance(done, dict) and len(done["deliveries"]) == 1
