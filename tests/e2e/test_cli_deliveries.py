"""Dead letters and deliveries from the command line, as a user types it
(issue 37): `dlq list` gives the ids `dlq replay --id` needs, `delivery
list|show` read what GET /v1/deliveries answers, `dlq analyze` names an
endpoint whose every attempt failed alike, `health` says what its oldest
row is, and a replayed delivery keeps its earlier attempts."""

from __future__ import annotations

import json
import re
from typing import Any

import asyncpg

from dispatcher.core.encoding import to_json
from dispatcher.ops import browse, reports
from tests.helpers import cli, cli_env
from tests.receivers import Receiver, ok, status

FAST_WORKER = {"DISPATCHER_POLL_INTERVAL_S": "0.2", "DISPATCHER_LEASE_MARGIN_S": "1"}


async def _ok(db_url: str, *args: str) -> str:
    code, out, err = await cli(db_url, *args, env=cli_env(db_url, **FAST_WORKER))
    assert code == 0, f"dispatcher {' '.join(args)}: exit {code}: {err[-2000:]}"
    assert "Traceback" not in err
    return out


async def _json(db_url: str, *args: str) -> Any:
    return json.loads(await _ok(db_url, *args, "--json"))


def _as_route(doc: Any) -> Any:
    """A document as the HTTP route serialises it."""
    return json.loads(to_json(doc))


async def _broken_endpoint(db_url: str, receiver: Receiver, events: int) -> int:
    """An endpoint answering 500 to every attempt, three attempts each,
    retried at once: `events` dead letters of three attempts."""
    receiver.routes["/broken"] = status(500)
    ep = await _json(db_url, "endpoint", "add", "--url", receiver.url("/broken"),
                     "--event-type", "order.paid", "--max-attempts", "3",
                     "--retry-base-ms", "0", "--retry-cap-ms", "0")  # fmt: skip
    for i in range(events):
        await _ok(db_url, "enqueue", "--event-type", "order.paid", "--payload", f'{{"n": {i}}}',
                  "--event-id", f"ord-{i}")  # fmt: skip
    await _ok(db_url, "run", "--drain")
    assert len(receiver.requests_to("/broken")) == 3 * events
    endpoint_id: int = ep["id"]
    return endpoint_id


async def test_dlq_analyze_names_an_endpoint_that_failed_every_attempt_alike(
    db_url: str, receiver: Receiver
) -> None:
    # The endpoint: 9 of 9 attempts answered HTTP 500.
    broken = await _broken_endpoint(db_url, receiver, 3)
    (row,) = await _json(db_url, "dlq", "analyze")
    assert row["endpoint_id"] == broken and row["dead"] == 3 and row["avg_attempts"] == 3.0
    assert row["pattern"] == "status-code" and row["primary_status_code"] == 500
    action = row["suggested_action"]
    assert action.startswith("every attempt failed with HTTP 500: fix the receiver, then ")
    assert f"`dispatcher dlq replay --endpoint {broken} --since " in action
    assert "max_attempts" not in action and "gradual" not in action
    out = await _ok(db_url, "dlq", "analyze")
    said = " ".join(line.strip() for line in out.splitlines()[2:])
    assert said.startswith("every attempt failed with HTTP 500: fix the receiver, then"), out


async def test_dlq_list_gives_the_ids_replay_and_show_take(
    db_url: str, receiver: Receiver, conn: asyncpg.Connection
) -> None:
    broken = await _broken_endpoint(db_url, receiver, 3)
    healthy = await _json(db_url, "endpoint", "add", "--url", receiver.url("/ok"),
                          "--event-type", "other")  # fmt: skip
    await _ok(db_url, "enqueue", "--event-type", "other", "--payload", "{}", "--event-id", "o-1")
    await _ok(db_url, "run", "--drain")

    listed = await _json(db_url, "dlq", "list")
    assert listed == _as_route(await reports.dead_letters(conn))  # GET /v1/dead-letters' body
    assert [r["event_id"] for r in listed] == ["ord-2", "ord-1", "ord-0"]  # newest first
    assert {r["endpoint_id"] for r in listed} == {broken}
    assert all(r["attempt_count"] == 3 and r["last_status_code"] == 500 for r in listed)
    ids = [str(r["id"]) for r in listed]
    assert await _json(db_url, "dlq", "list", "--endpoint", str(healthy["id"])) == []
    assert len(await _json(db_url, "dlq", "list", "--limit", "2")) == 2
    assert len(await _json(db_url, "dlq", "list", "--app", "default")) == 3

    out = await _ok(db_url, "dlq", "list")
    header, *rows = out.splitlines()
    assert header.split() == ["id", "endpoint", "event", "type", "attempts", "died", "last",
                              "result"]  # fmt: skip
    assert rows[0].split()[:5] == [ids[0], str(broken), "ord-2", "order.paid", "3"]
    assert rows[0].endswith("HTTP 500")
    hint = " ".join(rows[3:])
    assert f"`dispatcher delivery show {ids[0]}`" in hint
    assert f"`dispatcher dlq replay --id {' '.join(ids)}` requeues them" in hint
    assert max(len(line) for line in out.splitlines()) <= 100, out

    # The ids it printed are the ones replay takes.
    assert await _json(db_url, "dlq", "replay", "--id", ids[0]) == {"requeued": 1}
    assert len(await _json(db_url, "dlq", "list")) == 2


async def test_delivery_list_filters_as_the_route(
    db_url: str, receiver: Receiver, conn: asyncpg.Connection
) -> None:
    broken = await _broken_endpoint(db_url, receiver, 2)
    await _json(db_url, "endpoint", "add", "--url", receiver.url("/ok"), "--event-type", "other")
    await _ok(db_url, "enqueue", "--event-type", "other", "--payload", "{}", "--event-id", "o-1")
    await _ok(db_url, "run", "--drain")

    doc = await _json(db_url, "delivery", "list")
    assert doc == _as_route(await browse.list_deliveries(conn))  # GET /v1/deliveries
    assert [d["event_id"] for d in doc["deliveries"]] == ["o-1", "ord-1", "ord-0"]
    assert doc["next_cursor"] is None
    dead = await _json(db_url, "delivery", "list", "--status", "dead_letter",
                       "--endpoint", str(broken), "--event-type", "order.paid")  # fmt: skip
    assert [d["event_id"] for d in dead["deliveries"]] == ["ord-1", "ord-0"]
    one = await _json(db_url, "delivery", "list", "--event-id", "ord-0")
    assert one == _as_route(await browse.list_deliveries(conn, event_id="ord-0"))
    assert len(one["deliveries"][0]["attempts"]) == 3  # with an event id, its attempts
    since = doc["deliveries"][0]["created_at"]
    assert [
        d["event_id"]
        for d in (await _json(db_url, "delivery", "list", "--since", since))["deliveries"]
    ] == ["o-1"]
    # A page at a time: the cursor it prints is the next page's.
    page = await _json(db_url, "delivery", "list", "--limit", "2")
    assert len(page["deliveries"]) == 2 and page["next_cursor"] is not None
    rest = await _json(db_url, "delivery", "list", "--limit", "2", "--cursor", page["next_cursor"])
    assert [d["event_id"] for d in rest["deliveries"]] == ["ord-0"]

    out = await _ok(db_url, "delivery", "list", "--limit", "2")
    lines = out.splitlines()
    assert lines[0].split()[:6] == ["id", "endpoint", "event", "type", "status", "attempts"]
    assert "o-1" in lines[1] and "delivered" in lines[1] and "1 of 5" in lines[1]
    assert "ord-1" in lines[2] and "dead_letter" in lines[2] and "3 of 3" in lines[2]
    assert "HTTP 500" in lines[2], out
    assert lines[3] == f"more: the same command with `--cursor {page['next_cursor']}`"

    code, _, err = await cli(db_url, "delivery", "list", "--status", "lost")
    assert code == 2 and "invalid choice" in err and "Traceback" not in err
    code, _, err = await cli(db_url, "delivery", "show", "424242")
    assert code == 2 and err.strip() == "dispatcher: error: no delivery with id 424242"


async def test_a_replayed_delivery_shows_its_earlier_attempts(
    db_url: str, receiver: Receiver, conn: asyncpg.Connection
) -> None:
    # Issue 37: after a replay, "1 of 3" and no trace of the failures before it.
    broken = await _broken_endpoint(db_url, receiver, 1)
    (dead,) = await _json(db_url, "dlq", "list")
    receiver.routes["/broken"] = ok  # the receiver fixed
    assert await _json(db_url, "dlq", "replay", "--endpoint", str(broken)) == {"requeued": 1}
    await _ok(db_url, "run", "--drain")

    doc = await _json(db_url, "delivery", "show", str(dead["id"]))
    assert doc == _as_route(await browse.get_delivery(conn, dead["id"]))  # GET /v1/deliveries/ID
    assert doc["status"] == "delivered" and doc["attempt_count"] == 1
    assert [a["status_code"] for a in doc["attempts"]] == [500, 500, 500, 200]

    out = await _ok(db_url, "delivery", "show", str(dead["id"]))
    lines = out.splitlines()
    assert (
        lines[0] == f"delivery {dead['id']}: order.paid to endpoint {broken} (application default)"
    )
    assert "attempts     1 of 3 since it was replayed, after 3 earlier attempts" in lines, out
    assert re.search(r"^status +delivered \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$", out, re.M), out
    details = next(i for i, x in enumerate(lines) if x.startswith("attempt details"))
    table = lines[lines.index("attempts") + 1 : details - 1]
    # Each attempt's record (schema 024): timings and who answered.
    timed = [x for x in lines[details + 1 : lines.index("payload") - 1] if x[:1].isdigit()]
    assert len(timed) == 4 and all("from 127.0.0.1" in x for x in timed), out
    assert table[0].split() == ["#", "at", "result", "response", "note"]
    assert [row.split()[0] for row in table[1:]] == ["1", "2", "3", "4"]
    assert all("HTTP 500" in row for row in table[1:4])
    assert "HTTP 200" in table[4] and table[4].endswith("the first after the replay")
    assert json.loads("\n".join(lines[lines.index("payload") + 1 :])) == {"n": 0}
    # The list read with its attempts says so too.
    listed = await _ok(db_url, "delivery", "list", "--event-id", "ord-0")
    assert "1 of 3, replayed" in listed, listed


async def test_health_says_what_its_oldest_row_is(db_url: str, receiver: Receiver) -> None:
    # Issue 37: `oldest_pending` set while `pending` is 0, the row awaiting a retry.
    receiver.routes["/flaky"] = status(503)
    await _json(db_url, "endpoint", "add", "--url", receiver.url("/flaky"), "--event-type", "t",
                "--retry-base-ms", "600000")  # fmt: skip
    await _ok(db_url, "enqueue", "--event-type", "t", "--payload", "{}", "--event-id", "e-1")
    await _ok(db_url, "run", "--drain")  # one attempt, then a retry minutes later
    doc = await _json(db_url, "health")
    assert doc["pending"] == 0 and doc["awaiting_retry"] == 1 and doc["oldest_pending"]

    out = await _ok(db_url, "health")
    figures = dict(re.findall(r"^(\w+) +(.*)$", out, re.M))
    assert list(figures) == list(doc), out  # every figure of the document, in its order
    assert figures["pending"] == "0"
    assert figures["awaiting_retry"] == "1  (failed, a retry scheduled)"
    assert re.fullmatch(
        r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC, \d+ s ago: the oldest row awaiting retry",
        figures["oldest_pending"],
    ), out
    assert max(len(line) for line in out.splitlines()) <= 100, out
