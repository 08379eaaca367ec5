"""Postback tooling through the `dispatcher` command: endpoint flags and
their refusals, held events released and cancelled, and a test shot that
prints the partner's answer and stores nothing."""

from __future__ import annotations

import json

import asyncpg
import pytest

from tests.helpers import cli, statuses
from tests.receivers import Receiver, bodies


async def test_postbacks_through_the_cli(
    db_url: str, receiver: Receiver, conn: asyncpg.Connection
) -> None:
    receiver.routes["/pb"] = bodies('{"result": "success"}')
    code, out, err = await cli(
        db_url, "endpoint", "add", "--method", "GET", "--macro-style", "hash",
        "--url", receiver.url("/pb?c=#click_id#&s=#status#&p=#postback_id#"),
        "--map", '{"status": {"approved": "1", "*": "0"}}',
        "--disable-after", "10", "--within-s", "259200", "--json",
    )  # fmt: skip
    assert code == 0, err
    ep = json.loads(out)
    code, out, _ = await cli(db_url, "endpoint", "list", "--json")
    [listed] = json.loads(out)
    assert listed["macro_style"] == "hash" and listed["disable_after"] == 10
    assert listed["value_map"] == {"status": {"approved": "1", "*": "0"}}

    # A test shot: printed, nothing stored.
    code, out, err = await cli(db_url, "endpoint", "test", str(ep["id"]),
                               "--payload", '{"click_id": "a b", "status": "x"}')  # fmt: skip
    assert code == 0, err
    assert "/pb?c=a%20b&s=0&p=" in out and "status 200" in out and '{"result": "success"}' in out
    code, out, _ = await cli(db_url, "endpoint", "test", str(ep["id"]), "--json")
    shot = json.loads(out)
    assert code == 1 and shot["sent"] is False and shot["error"] == "missing macro: click_id"
    assert await statuses(conn) == {}
    assert await conn.fetchval("SELECT count(*) FROM endpoint_latency") == 0

    # Held, then released; held, then cancelled.
    payload = '{"click_id": "c1", "status": "approved"}'
    for event in ("evt_a", "evt_b"):
        code, out, err = await cli(db_url, "enqueue", "--event-type", "sale", "--hold",
                                   "--event-id", event, "--payload", payload, "--json")  # fmt: skip
        assert code == 0, err
    assert await statuses(conn) == {"held": 2}
    code, out, _ = await cli(db_url, "event", "release", "evt_a", "--json")
    assert code == 0 and len(json.loads(out)["released"]) == 1
    code, out, _ = await cli(db_url, "event", "cancel", "evt_b")
    assert code == 0 and out.startswith("event evt_b: cancelled [")
    code, _, err = await cli(db_url, "run", "--drain")
    assert code == 0, err
    assert await statuses(conn) == {"delivered": 1, "cancelled": 1}
    assert [r.query.split("&p=")[0] for r in receiver.received[1:]] == ["c=c1&s=1"]

    # Delayed: queued, not sent by a drain.
    code, _, err = await cli(db_url, "enqueue", "--event-type", "sale", "--delay-s", "3600",
                             "--payload", payload)  # fmt: skip
    assert code == 0, err
    assert (await statuses(conn))["pending"] == 1


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["endpoint", "add", "--url", "https://p.example/{v|raw}?x=1"], "query"),
        (
            ["endpoint", "add", "--url", "https://p.example/?x=#v", "--macro-style", "hash"],
            "unbalanced",
        ),
        (["endpoint", "add", "--url", "https://p.example/", "--map", "[1]"], "value_map"),
        (["endpoint", "add", "--url", "https://p.example/", "--disable-after", "3"], "go together"),
        (
            [
                "endpoint",
                "add",
                "--url",
                "https://p.example/",
                "--disable-after",
                "0",
                "--within-s",
                "60",
            ],
            "disable_after",
        ),
        (
            [
                "enqueue",
                "--event-type",
                "t",
                "--payload",
                "{}",
                "--delay-s",
                "1",
                "--deliver-at",
                "2030-01-01T00:00:00Z",
            ],
            "not both",
        ),
        (["enqueue", "--file", "-", "--hold"], "--file"),
        (["event", "release", "evt_none"], "no such event"),
        (["endpoint", "test", "999999"], "no endpoint"),
    ],
)
async def test_bad_input_is_one_line_exit_2(db_url: str, args: list[str], words: str) -> None:
    code, out, err = await cli(db_url, *args)
    assert code == 2, (code, out, err)
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert words in err
