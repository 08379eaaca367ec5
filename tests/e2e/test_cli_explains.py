"""A command line that explains itself (issue 25): `endpoint update`, the
usage when no command is given, a word when nobody takes an event, and
error lines that say where and what to type instead."""

from __future__ import annotations

import json

import asyncpg

from tests.helpers import cli, cli_env


def _one_line_error(code: int, err: str, expected_code: int = 2) -> str:
    assert code == expected_code, (code, err)
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith("dispatcher: error:")
    return err


async def _add(db_url: str, *args: str) -> dict[str, object]:
    code, out, err = await cli(db_url, "endpoint", "add", "--json", *args)
    assert code == 0, err
    doc: dict[str, object] = json.loads(out)
    return doc


async def test_endpoint_update_changes_in_place(db_url: str, conn: asyncpg.Connection) -> None:
    made = await _add(
        db_url, "--url", "https://example.com/a", "--event-type", "order.paid",
        "--max-attempts", "3", "--header", "X-Key: k1", "--name", "orders",
    )  # fmt: skip
    secret_before = await conn.fetchval("SELECT secret FROM endpoints WHERE id = $1", made["id"])
    code, out, err = await cli(
        db_url, "endpoint", "update", str(made["id"]), "--url", "https://example.com/b",
        "--event-type", "order.refunded", "order.paid", "--retry-cap-ms", "60000",
        "--filter", '{"status": "paid"}', "--method", "put", "--json",
    )  # fmt: skip
    assert code == 0, err
    doc = json.loads(out)
    assert doc["id"] == made["id"] and "secret" not in doc
    assert doc["url"] == "https://example.com/b"
    assert doc["event_types"] == ["order.refunded", "order.paid"]
    assert doc["retry_cap_ms"] == 60000 and doc["filter"] == {"status": "paid"}
    assert doc["method"] == "PUT"
    # Flags not given stay as they were.
    assert doc["max_attempts"] == 3 and doc["name"] == "orders"
    assert doc["headers"] == {"X-Key": "••••"}
    after = await conn.fetchval("SELECT secret FROM endpoints WHERE id = $1", made["id"])
    assert after == secret_before
    code, out, err = await cli(db_url, "endpoint", "update", str(made["id"]), "--max-attempts", "7")
    assert code == 0, err
    assert out.strip() == f"endpoint {made['id']} updated: max_attempts"
    code, out, _ = await cli(db_url, "endpoint", "list", "--json")
    (listed,) = json.loads(out)
    assert listed["max_attempts"] == 7 and listed["url"] == "https://example.com/b"


async def test_endpoint_update_refuses_like_add(db_url: str) -> None:
    made = await _add(db_url, "--url", "https://example.com/a")
    eid = str(made["id"])
    for args, words in (
        ([], "needs a flag"),
        (["--max-attempts", "0"], "max_attempts"),
        (["--url", "http://10.0.0.1/x"], "DISPATCHER_ALLOW_PRIVATE_TARGETS"),
        (["--secret", "whsec_vRMDgrSfGTWdzBmkAP7obL+ous6MyFff"], "rotate-secret"),
        (["--app", "other"], "stays in its application"),
        (["--signature", "v1a"], "rotate-secret"),
    ):
        env = cli_env(db_url)
        env.pop("DISPATCHER_ALLOW_PRIVATE_TARGETS")
        code, _, err = await cli(db_url, "endpoint", "update", eid, *args, env=env)
        assert words in _one_line_error(code, err), (args, err)
    code, _, err = await cli(db_url, "endpoint", "update", "999999", "--max-attempts", "2")
    assert code != 0 and "999999" in err and "Traceback" not in err


async def test_update_takes_every_setting_flag_of_add() -> None:
    from dispatcher.cli.main import build_parser

    parser = build_parser()

    def flags(*path: str) -> set[str]:
        p = parser
        for name in path:
            sub = next(a for a in p._actions if isinstance(a.choices, dict) and name in a.choices)
            p = sub.choices[name]
        return {s for a in p._actions for s in a.option_strings}

    add, update = flags("endpoint", "add"), flags("endpoint", "update")
    assert add - update == set()  # SPEC: "every flag of endpoint add"
    assert "--url" in update and "--filter" in update and "--header" in update


async def test_no_command_prints_the_usage() -> None:
    for args in ([], ["endpoint"]):
        code, out, err = await cli("postgresql://unused", *args)
        assert code == 2 and out == ""
        assert err.startswith("usage: dispatcher"), err
        assert "the following arguments are required" not in err
    code, _, err = await cli("postgresql://unused")
    for command in ("migrate", "endpoint", "enqueue", "run", "dlq"):
        assert f"\n    {command} " in err, command


async def test_enqueue_nobody_takes_says_so(db_url: str) -> None:
    await _add(db_url, "--url", "https://example.com/a", "--event-type", "order.paid")
    code, out, err = await cli(db_url, "enqueue", "--event-type", "order.shipped",
                               "--payload", "{}", "--json")  # fmt: skip
    assert code == 0 and json.loads(out)["deliveries"] == []
    assert err.count("\n") == 1
    assert "nothing queued" in err and "order.shipped" in err and "default" in err
    code, _, err = await cli(db_url, "enqueue", "--event-type", "order.paid", "--payload", "{}")
    assert code == 0 and err == ""


async def test_cannot_connect_says_where_never_the_password(db_url: str) -> None:
    url = "postgresql://someone:hunter2@127.0.0.1:1/nowhere"
    code, _, err = await cli(url, "health")
    err = _one_line_error(code, err, 1)
    assert "127.0.0.1:1" in err and "nowhere" in err and "hunter2" not in err
    url = "postgresql://someone@/nowhere?host=/nonexistent-dir"
    code, _, err = await cli(url, "health")
    assert "/nonexistent-dir/.s.PGSQL.5432" in _one_line_error(code, err, 1)


async def test_input_errors_say_what_to_type(db_url: str) -> None:
    code, _, err = await cli(db_url, "endpoint", "add", "--url", "https://example.com/",
                             "--filter", "{status: paid}")  # fmt: skip
    err = _one_line_error(code, err)
    assert "not valid JSON" in err and "must be a JSON object" not in err
    code, _, err = await cli(db_url, "endpoint", "add", "--url", "localhost:8081/x")
    assert "http://localhost:8081/x" in _one_line_error(code, err)
    env = cli_env(db_url, DISPATCHER_MAX_PAYLOAD_BYTES="10")
    code, _, err = await cli(db_url, "enqueue", "--event-type", "t",
                             "--payload", '{"a": "0123456789"}', env=env)  # fmt: skip
    assert "DISPATCHER_MAX_PAYLOAD_BYTES" in _one_line_error(code, err)
