"""The text forms of reports, as a person reads them in a terminal: words
for yes and no, the settings that shape requests, units, and rows that fit
in 100 columns (issue 25)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.helpers import cli, cli_env
from tests.receivers import Receiver, status


async def test_endpoint_list_reads_as_words(db_url: str) -> None:
    code, _, err = await cli(db_url, "endpoint", "add", "--url", "https://example.com/a",
                             "--method", "put", "--filter", '{"status": "paid"}',
                             "--ordering", "fifo", "--ordering-key", "order.id")  # fmt: skip
    assert code == 0, err
    code, out, err = await cli(db_url, "endpoint", "list")
    assert code == 0, err
    header, row = out.splitlines()
    assert "True" not in out and "False" not in out
    for column in ("enabled", "method", "filter", "ordering"):
        assert column in header.split(), header
    assert " yes " in row and "PUT" in row and '{"status":"paid"}' in row
    assert "fifo by order.id" in row


async def test_alerts_say_their_units(db_url: str) -> None:
    code, out, err = await cli(db_url, "alerts")
    assert code == 0, err
    assert "dead letters in the last hour" in out
    assert "nothing pending" in out and " s" in out
    assert "p95 over 2000 ms" in out
    assert "False" not in out and "True" not in out


async def test_dlq_analyze_rows_fit_100_columns(db_url: str, receiver: Receiver) -> None:
    receiver.routes["/no"] = status(401)
    code, out, err = await cli(db_url, "endpoint", "add", "--url", receiver.url("/no"),
                               "--max-attempts", "1")  # fmt: skip
    assert code == 0, err
    for i in range(3):
        code, _, err = await cli(db_url, "enqueue", "--event-type", "t", "--payload", "{}",
                                 "--event-id", f"e{i}")  # fmt: skip
        assert code == 0, err
    env = cli_env(db_url, DISPATCHER_POLL_INTERVAL_S="0.2")
    code, _, err = await cli(db_url, "run", "--drain", env=env)
    assert code == 0, err
    code, out, err = await cli(db_url, "dlq", "analyze", "--json")
    (doc,) = json.loads(out)
    assert doc["pattern"] == "status-code"
    code, out, err = await cli(db_url, "dlq", "analyze")
    assert code == 0, err
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 100, out
    assert "401" in lines[1] and "status-code" in lines[1]
    # The suggested action, on lines of its own, its command never split.
    action = " ".join(line.strip() for line in lines[2:])
    assert action.startswith("401 spike") and "`dispatcher dlq replay --endpoint" in action
    assert all(line.count("`") % 2 == 0 for line in lines[2:]), out


async def test_enqueue_counts_read_as_words(db_url: str, tmp_path: Path) -> None:
    # Issue 37: `1 events, 1 deliveries queued`.
    ids = []
    for path in ("/a", "/b"):
        url = f"https://example.com{path}"
        code, out, err = await cli(db_url, "endpoint", "add", "--url", url, "--event-type", "t",
                                   "--json")  # fmt: skip
        assert code == 0, err
        ids.append(json.loads(out)["id"])
    code, out, err = await cli(db_url, "enqueue", "--event-type", "t", "--payload", "{}",
                               "--event-id", "e1")  # fmt: skip
    assert code == 0, err
    assert re.fullmatch(r"event e1: 2 deliveries \(ids \d+, \d+\)\n", out), out
    code, out, _ = await cli(db_url, "enqueue", "--event-type", "t", "--payload", "{}",
                             "--event-id", "e2", "--endpoint", str(ids[0]))  # fmt: skip
    assert re.fullmatch(r"event e2: 1 delivery \(id \d+\)\n", out), out
    one = tmp_path / "one.jsonl"
    one.write_text(json.dumps({"event_type": "t", "payload": {}, "event_id": "e3"}) + "\n")
    code, out, err = await cli(db_url, "enqueue", "--file", str(one))
    assert (code, out) == (0, "1 event read, 2 deliveries queued\n"), err
    code, out, _ = await cli(db_url, "enqueue", "--file", str(one))  # the same ids: nothing new
    assert out == "1 event read, 0 deliveries queued\n"
    two = tmp_path / "two.jsonl"
    two.write_text("".join(json.dumps({"event_type": "t", "payload": {}, "event_id": f"f{i}",
                                       "endpoint": ids[1]}) + "\n" for i in range(2)))  # fmt: skip
    code, out, _ = await cli(db_url, "enqueue", "--file", str(two))
    assert out == "2 events read, 2 deliveries queued\n"
