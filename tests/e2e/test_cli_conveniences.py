"""The newcomer's conveniences on the command line: payloads from a file or
standard input, deleting an endpoint."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import asyncpg

from tests.helpers import cli, cli_env
from tests.receivers import Receiver


def _one_line_error(code: int, err: str, expected_code: int = 2) -> None:
    assert code == expected_code, (code, err)
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith("dispatcher: error:")


async def _cli_stdin(db_url: str, data: bytes, *args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "dispatcher", *args,
        env=cli_env(db_url),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(data), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def _stored(conn: asyncpg.Connection, event_id: str) -> str:
    text: str = await conn.fetchval(
        "SELECT payload::text FROM webhook_queue WHERE event_id = $1", event_id
    )
    return text


async def test_payload_from_file_and_stdin_kept_exactly(
    db_url: str, tmp_path: Path, conn: asyncpg.Connection
) -> None:
    code, out, err = await cli(db_url, "endpoint", "add", "--url", "https://example.com/h")
    assert code == 0, err
    raw = b'{ "b" : 1,\n  "a": [1.50, "\\u00e9\xc3\xa9"] }\n'
    f = tmp_path / "p.json"
    f.write_bytes(raw)
    code, out, err = await cli(db_url, "enqueue", "--event-type", "t", "--payload", f"@{f}",
                               "--event-id", "from-file", "--json")  # fmt: skip
    assert code == 0, err
    doc = json.loads(out)
    assert doc["event_id"] == "from-file" and len(doc["deliveries"]) == 1
    assert (await _stored(conn, "from-file")).encode() == raw

    args = ["enqueue", "--event-type", "t", "--payload", "-", "--event-id", "from-stdin", "--json"]
    code, out, err = await _cli_stdin(db_url, raw, *args)
    assert code == 0, err
    assert len(json.loads(out)["deliveries"]) == 1
    assert (await _stored(conn, "from-stdin")).encode() == raw


async def test_payload_file_errors_are_one_line(db_url: str, tmp_path: Path) -> None:
    code, _, err = await cli(db_url, "enqueue", "--event-type", "t",
                             "--payload", f"@{tmp_path / 'missing.json'}")  # fmt: skip
    _one_line_error(code, err)
    assert "missing.json" in err
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    code, _, err = await cli(db_url, "enqueue", "--event-type", "t", "--payload", f"@{bad}")
    _one_line_error(code, err)
    code, _, err = await _cli_stdin(db_url, b"", "enqueue", "--event-type", "t", "--payload", "-")
    _one_line_error(code, err)


async def test_endpoint_delete(db_url: str, receiver: Receiver, conn: asyncpg.Connection) -> None:
    _, out, _ = await cli(db_url, "endpoint", "add", "--url", receiver.url("/gone"), "--json")
    gone = json.loads(out)
    _, out, _ = await cli(db_url, "endpoint", "add", "--url", receiver.url("/kept"), "--json")
    kept = json.loads(out)
    for i in range(3):
        await cli(db_url, "enqueue", "--event-type", "t", "--payload", "{}", "--event-id", f"e{i}")
    await conn.execute(
        "UPDATE webhook_queue SET status = 'failed', attempt_count = 1 WHERE event_id = 'e1'"
    )

    code, _, err = await cli(db_url, "endpoint", "delete", str(gone["id"]))
    _one_line_error(code, err)
    assert "force" in err
    assert await conn.fetchval("SELECT deleted_at FROM endpoints WHERE id = $1", gone["id"]) is None

    code, out, err = await cli(db_url, "endpoint", "delete", str(gone["id"]), "--force", "--json")
    assert code == 0, err
    assert json.loads(out) == {"id": gone["id"], "url": gone["url"], "deleted": True,
                               "dead_lettered": 3}  # fmt: skip
    rows = await conn.fetch(
        "SELECT status, last_error FROM webhook_queue WHERE endpoint_id = $1", gone["id"]
    )
    assert [(r["status"], r["last_error"]) for r in rows] == [
        ("dead_letter", "endpoint deleted")
    ] * 3

    _, out, _ = await cli(db_url, "endpoint", "list", "--json")
    assert [e["id"] for e in json.loads(out)] == [kept["id"]]
    _, out, _ = await cli(db_url, "endpoint", "health", "--json")
    assert [e["endpoint_id"] for e in json.loads(out)] == [kept["id"]]

    # Gets nothing more: not by fan-out (CLI, SQL, bulk), not by target, not by replay.
    _, out, _ = await cli(db_url, "enqueue", "--event-type", "t", "--payload", "{}", "--json")
    assert len(json.loads(out)["deliveries"]) == 1
    ids = await conn.fetchval("SELECT dispatcher_enqueue('t', '{}', 'sql-1')")
    assert len(ids) == 1
    code, _, err = await cli(db_url, "enqueue", "--event-type", "t", "--payload", "{}",
                             "--endpoint", str(gone["id"]))  # fmt: skip
    _one_line_error(code, err)
    code, _, err = await cli(db_url, "dlq", "replay", "--endpoint", str(gone["id"]))
    _one_line_error(code, err)
    dead = [r["id"] for r in await conn.fetch(
        "SELECT id FROM webhook_queue WHERE endpoint_id = $1", gone["id"])]  # fmt: skip
    _, out, _ = await cli(db_url, "dlq", "replay", "--id", *map(str, dead), "--json")
    assert json.loads(out) == {"requeued": 0}
    for args in (["disable"], ["enable"], ["rotate-secret"], ["delete"], ["delete", "--force"]):
        code, _, err = await cli(db_url, "endpoint", args[0], str(gone["id"]), *args[1:])
        _one_line_error(code, err)

    # A row that slipped in (an enqueue racing the delete) is never sent.
    await conn.execute(
        "INSERT INTO webhook_queue (endpoint_id, event_id, event_type, payload)"
        " VALUES ($1, 'late', 't', '{}')",
        gone["id"],
    )
    code, _, err = await cli(db_url, "run", "--drain")
    assert code == 0, err
    assert [r.path for r in receiver.received] == ["/kept", "/kept", "/kept", "/kept", "/kept"]
    assert (
        await conn.fetchval(
            "SELECT count(*) FROM webhook_queue WHERE endpoint_id = $1 AND status = 'dead_letter'",
            gone["id"],
        )
        == 3
    )


async def test_endpoint_delete_without_queued_rows(db_url: str) -> None:
    _, out, _ = await cli(db_url, "endpoint", "add", "--url", "https://example.com/h", "--json")
    ep = json.loads(out)
    code, out, err = await cli(db_url, "endpoint", "delete", str(ep["id"]))
    assert code == 0, err
    assert out.strip() == f"endpoint {ep['id']} deleted"
    _, out, _ = await cli(db_url, "endpoint", "list", "--json")
    assert json.loads(out) == []
