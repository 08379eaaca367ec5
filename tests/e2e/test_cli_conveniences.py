"""The newcomer's conveniences on the command line: payloads from a file or
standard input, deleting an endpoint."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import asyncpg

from tests.helpers import cli, cli_env


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
