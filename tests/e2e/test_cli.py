"""The command line as a user runs it: JSON documents, one-line errors, exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import asyncpg
import pytest

from tests.helpers import cli, cli_env, statuses
from tests.receivers import Receiver, status


def _one_line_error(code: int, out: str, err: str, expected_code: int) -> None:
    assert code == expected_code, (code, out, err)
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith("dispatcher: error:")


async def test_story_through_the_cli(db_url: str, receiver: Receiver, tmp_path: Path,
                                     conn: asyncpg.Connection) -> None:  # fmt: skip
    receiver.routes["/broken"] = status(401)
    code, out, _ = await cli(db_url, "migrate", "--json")
    assert code == 0 and json.loads(out)["current"] is True
    code, out, err = await cli(db_url, "endpoint", "add", "--url", receiver.url("/ok"),
                               "--event-type", "order.paid", "--json")  # fmt: skip
    assert code == 0, err
    ok = json.loads(out)
    assert ok["secret"].startswith("whsec_") and isinstance(ok["id"], int)
    code, out, _ = await cli(db_url, "endpoint", "add", "--url", receiver.url("/broken"),
                             "--max-attempts", "2", "--failure-threshold", "60",
                             "--json")  # fmt: skip
    broken = json.loads(out)
    code, out, _ = await cli(db_url, "endpoint", "list", "--json")
    listed = json.loads(out)
    assert [e["id"] for e in listed] == [ok["id"], broken["id"]]
    assert all("secret" not in e for e in listed)

    args = ["enqueue", "--event-type", "order.paid", "--payload", '{"amount": 10}',
            "--event-id", "ev-1", "--json"]  # fmt: skip
    code, out, _ = await cli(db_url, *args)
    doc = json.loads(out)
    assert doc["event_id"] == "ev-1" and len(doc["deliveries"]) == 2
    args = ["enqueue", "--event-type", "order.paid", "--payload", '{"amount": 10}',
            "--event-id", "ev-1", "--json"]  # fmt: skip
    code, out, _ = await cli(db_url, *args)
    assert json.loads(out)["deliveries"] == doc["deliveries"]
    assert await conn.fetchval("SELECT count(*) FROM webhook_queue") == 2

    lines = [json.dumps({"event_type": "other", "payload": {"n": i}}) for i in range(50)]
    lines.append(json.dumps({"event_type": "order.paid", "payload": [1], "event_id": "ev-2",
                             "endpoint": ok["id"]}))  # fmt: skip
    f = tmp_path / "events.jsonl"
    f.write_text("\n".join(lines) + "\n")
    code, out, err = await cli(db_url, "enqueue", "--file", str(f), "--json")
    assert code == 0, err
    assert json.loads(out) == {"events": 51, "deliveries": 51}

    code, out, err = await cli(db_url, "run", "--drain", "--json")
    assert code == 0, err
    assert await statuses(conn) == {"delivered": 2, "dead_letter": 51}

    code, out, _ = await cli(db_url, "health", "--json")
    health = json.loads(out)
    for key in ("pending", "awaiting_retry", "in_flight", "dead_letter", "delivered_last_hour",
                "failed_last_hour", "oldest_pending", "avg_delivery_ms_last_hour"):  # fmt: skip
        assert key in health
    assert health["dead_letter"] == 51 and health["delivered_last_hour"] == 2
    assert health["pending"] == 0 and health["oldest_pending"] is None

    code, out, _ = await cli(db_url, "dlq", "analyze", "--json")
    [row] = json.loads(out)
    assert row["endpoint_id"] == broken["id"] and row["dead"] == 51
    assert row["primary_status_code"] == 401 and row["pattern"] == "status-code"
    assert row["avg_attempts"] == 1.0 and "credentials" in row["suggested_action"]

    code, out, _ = await cli(db_url, "endpoint", "health", "--json")
    eh = {r["endpoint_id"]: r for r in json.loads(out)}
    assert eh[broken["id"]]["consecutive_failures"] == 51
    assert eh[broken["id"]]["state"] == "closed"  # 51 < 60
    assert eh[ok["id"]]["sample_count"] == 2 and eh[ok["id"]]["p50_ms"] is not None

    code, out, _ = await cli(db_url, "dlq", "replay", "--endpoint", str(broken["id"]), "--json")
    assert json.loads(out) == {"requeued": 51}
    assert await statuses(conn) == {"delivered": 2, "pending": 51}


async def test_rotate_disable_enable(db_url: str, receiver: Receiver) -> None:
    _, out, _ = await cli(db_url, "endpoint", "add", "--url", receiver.url("/ok"), "--json")
    ep = json.loads(out)
    _, out, _ = await cli(db_url, "endpoint", "rotate-secret", str(ep["id"]), "--json")
    rotated = json.loads(out)
    assert rotated["secret"] != ep["secret"] and rotated["secret"].startswith("whsec_")
    _, out, _ = await cli(db_url, "endpoint", "disable", str(ep["id"]), "--json")
    assert json.loads(out)["enabled"] is False
    _, out, _ = await cli(db_url, "endpoint", "enable", str(ep["id"]), "--json")
    assert json.loads(out)["enabled"] is True


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["enqueue", "--event-type", "t", "--payload", "{not json"], 2),
        (["enqueue", "--event-type", "t", "--payload", "{}", "--endpoint", "999"], 2),
        (["enqueue", "--file", "/nonexistent/events.jsonl"], 2),
        (["endpoint", "add", "--url", "ftp://example.com/x"], 2),
        (["endpoint", "add", "--url", "not a url"], 2),
        (["endpoint", "add", "--url", "https://example.com", "--timeout-ms", "-5"], 2),
        (["endpoint", "add", "--url", "https://example.com", "--secret", "whsec_!!"], 2),
        (["endpoint", "disable", "424242"], 2),
        (["endpoint", "rotate-secret", "abc"], 2),
        (["dlq", "replay"], 2),
        (["dlq", "replay", "--endpoint", "1", "--since", "yesterday"], 2),
        (["no-such-command"], 2),
    ],
)
async def test_bad_input_is_one_line_and_exit_2(db_url: str, args: list[str],
                                                expected: int) -> None:  # fmt: skip
    code, out, err = await cli(db_url, *args)
    _one_line_error(code, out, err, expected)


async def test_bad_file_line_queues_nothing(db_url: str, tmp_path: Path,
                                            conn: asyncpg.Connection) -> None:  # fmt: skip
    await cli(db_url, "endpoint", "add", "--url", "https://example.com/hook")
    await cli(db_url, "enqueue", "--event-type", "t", "--payload", "{}")
    f = tmp_path / "e.jsonl"
    f.write_text('{"event_type": "t", "payload": {}}\n{"event_type": "t", "payload": \n')
    code, out, err = await cli(db_url, "enqueue", "--file", str(f))
    _one_line_error(code, out, err, 2)
    assert ":2:" in err
    assert await statuses(conn) == {"pending": 1}  # what was queued before is intact


async def test_database_down_is_operational_error(db_url: str) -> None:
    env = cli_env("postgresql://postgres@127.0.0.1:1/nowhere")
    code, out, err = await cli(db_url, "health", "--json", env=env)
    _one_line_error(code, out, err, 1)
    code, out, err = await cli(db_url, "run", "--drain", env=env)
    _one_line_error(code, out, err, 1)


async def test_unmigrated_database_says_so(empty_db_url: str) -> None:
    code, out, err = await cli(empty_db_url, "health")
    _one_line_error(code, out, err, 1)
    assert "migrate" in err
