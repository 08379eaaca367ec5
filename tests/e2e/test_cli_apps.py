"""`dispatcher app …` and `--app` as a user runs them: JSON documents, a
token and a portal link shown once, one-line errors with exit 2, and
nothing queued for an application that does not exist."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import asyncpg
import pytest

from dispatcher.ops import tenancy
from tests.helpers import cli


def one_line_error(result: tuple[int, str, str]) -> str:
    code, out, err = result
    assert code == 2, result
    assert out == "" and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith("dispatcher: error:")
    return err


async def ok(db_url: str, *args: str) -> object:
    code, out, err = await cli(db_url, *args, "--json")
    assert code == 0, (args, err)
    return json.loads(out)


async def test_applications_tokens_and_portal_links(db_url: str, conn: asyncpg.Connection) -> None:
    acme = await ok(db_url, "app", "add", "acme", "--name", "Acme Inc")
    assert isinstance(acme, dict) and set(acme) == {"id", "name"}  # the SPEC's document
    assert (acme["id"], acme["name"]) == ("acme", "Acme Inc")
    plain = await ok(db_url, "app", "add", "globex")
    assert isinstance(plain, dict) and plain["name"] == "globex"
    err = one_line_error(await cli(db_url, "app", "add", "acme"))
    assert "acme" in err and "exists" in err
    assert await conn.fetchval("SELECT name FROM applications WHERE id = 'acme'") == "Acme Inc"

    token = await ok(db_url, "app", "token", "acme", "--ttl-s", "3600")
    assert isinstance(token, dict) and set(token) == {"app", "token", "expires_at"}
    assert token["app"] == "acme" and token["token"].startswith("dtk_")
    assert datetime.fromisoformat(token["expires_at"]) > datetime.now().astimezone()
    forever = await ok(db_url, "app", "token", "globex")
    assert isinstance(forever, dict) and forever["expires_at"] is None
    digest = tenancy.digest(token["token"])
    stored = await conn.fetchrow(
        "SELECT application_id, revoked_at FROM application_tokens WHERE token_hash = $1", digest
    )
    assert tuple(stored) == ("acme", None)

    code, out, err = await cli(db_url, "app", "revoke-token", token["token"])
    assert code == 0 and "acme" in out and token["token"] not in out + err
    revoked = "SELECT revoked_at FROM application_tokens WHERE token_hash = $1"
    assert await conn.fetchval(revoked, digest) is not None
    one_line_error(await cli(db_url, "app", "revoke-token", "dtk_" + "x" * 43))
    one_line_error(await cli(db_url, "app", "revoke-token", "not-a-token"))

    link = await ok(db_url, "app", "portal-link", "acme", "--base-url", "https://hooks.example/",
                    "--ttl-s", "600")  # fmt: skip
    assert isinstance(link, dict) and set(link) == {"url", "expires_at"}  # the SPEC's document
    prefix = "https://hooks.example/portal/login?code="
    assert link["url"].startswith(prefix) and len(link["url"]) > len(prefix) + 30
    code_hash = tenancy.digest(link["url"].removeprefix(prefix))
    assert await conn.fetchval(
        "SELECT application_id FROM portal_codes WHERE code_hash = $1", code_hash
    ) == "acme"  # fmt: skip
    one_line_error(await cli(db_url, "app", "portal-link", "acme", "--base-url", "ftp://x"))


@pytest.mark.parametrize(
    "args",
    [
        ("app", "add", "Bad Id"),
        ("app", "add", "x" * 65),
        ("app", "add", ""),
        ("app", "token", "nope"),
        ("app", "token", "Bad Id"),
        ("app", "portal-link", "nope", "--base-url", "https://hooks.example"),
        ("endpoint", "add", "--url", "https://x.example/h", "--app", "nope"),
        ("endpoint", "list", "--app", "nope"),
        ("enqueue", "--event-type", "t", "--payload", "{}", "--app", "nope"),
        ("enqueue", "--event-type", "t", "--payload", "{}", "--app", "Bad Id"),
    ],
    ids=lambda a: " ".join(a)[:40],
)
async def test_a_bad_or_unknown_application_exits_2_and_changes_nothing(
    db_url: str, conn: asyncpg.Connection, args: tuple[str, ...]
) -> None:
    await ok(db_url, "endpoint", "add", "--url", "https://default.example/h")
    tables = ("applications", "endpoints", "webhook_queue", "application_tokens", "portal_codes")
    count = " UNION ALL ".join(f"SELECT count(*) FROM {t}" for t in tables)
    before = await conn.fetch(count)
    one_line_error(await cli(db_url, *args))
    assert await conn.fetch(count) == before


async def test_endpoints_and_events_of_one_application(
    db_url: str, conn: asyncpg.Connection, tmp_path: Path
) -> None:
    for app in ("acme", "globex"):
        await ok(db_url, "app", "add", app)
    a = await ok(db_url, "endpoint", "add", "--url", "https://acme.example/h", "--app", "acme")
    g = await ok(db_url, "endpoint", "add", "--url", "https://globex.example/h", "--app", "globex")
    d = await ok(db_url, "endpoint", "add", "--url", "https://default.example/h")
    assert isinstance(a, dict) and isinstance(g, dict) and isinstance(d, dict)
    assert (a["app"], g["app"], d["app"]) == ("acme", "globex", "default")
    listed = await ok(db_url, "endpoint", "list", "--app", "acme")
    assert isinstance(listed, list) and [e["id"] for e in listed] == [a["id"]]
    every = await ok(db_url, "endpoint", "list")
    assert isinstance(every, list) and {e["id"] for e in every} == {a["id"], g["id"], d["id"]}

    event = ("enqueue", "--event-type", "t", "--payload", "{}", "--event-id", "same")
    sent = await ok(db_url, *event, "--app", "acme")
    assert isinstance(sent, dict) and len(sent["deliveries"]) == 1
    again = await ok(db_url, *event, "--app", "acme")
    assert again == sent
    to_default = await ok(db_url, *event)
    assert isinstance(to_default, dict) and to_default["deliveries"] != sent["deliveries"]
    rows = await conn.fetch("SELECT endpoint_id FROM webhook_queue ORDER BY id")
    assert [r[0] for r in rows] == [a["id"], d["id"]]
    # Another application's endpoint by id, under --app: refused, nothing queued.
    one_line_error(await cli(db_url, *event[:-2], "--endpoint", str(g["id"]), "--app", "acme"))

    lines = [
        {"event_type": "t", "payload": {"n": 1}, "event_id": "j1", "app": "globex"},
        {"event_type": "t", "payload": {"n": 2}, "event_id": "j1"},  # --app's
        {"event_type": "t", "payload": {"n": 3}, "event_id": "j1", "app": "acme"},
    ]
    f = tmp_path / "events.jsonl"
    f.write_text("".join(json.dumps(line) + "\n" for line in lines))
    # acme's j1 twice in one file: one delivery, so 2 in all.
    assert await ok(db_url, "enqueue", "--file", str(f), "--app", "acme") == {
        "events": 3,
        "deliveries": 2,
    }
    j1 = await conn.fetch("SELECT endpoint_id FROM webhook_queue WHERE event_id = 'j1'")
    assert sorted(r[0] for r in j1) == sorted([a["id"], g["id"]])
    # One line naming an unknown application: the whole file is refused.
    f.write_text(json.dumps({"event_type": "t", "payload": {}, "app": "nope"}) + "\n")
    before = await conn.fetchval("SELECT count(*) FROM webhook_queue")
    one_line_error(await cli(db_url, "enqueue", "--file", str(f)))
    assert await conn.fetchval("SELECT count(*) FROM webhook_queue") == before

    apps = await ok(db_url, "app", "list")
    assert isinstance(apps, list)
    by_id = {x["id"]: x for x in apps}
    assert set(by_id) == {"acme", "default", "globex"}
    assert {k: (v["endpoints"], v["queue_depth"]) for k, v in by_id.items()} == {
        "acme": (1, 2), "globex": (1, 1), "default": (1, 1),
    }  # fmt: skip


# ---------------------------------------------------------------- quotas


async def test_app_update_sets_shows_and_clears_quotas(db_url: str) -> None:
    await ok(db_url, "app", "add", "acme")
    doc = await ok(db_url, "app", "update", "acme", "--name", "Acme Inc",
                   "--max-endpoints", "10", "--max-events-per-s", "2.5")  # fmt: skip
    assert doc == {"id": "acme", "name": "Acme Inc", "max_endpoints": 10, "max_events_per_s": 2.5}
    apps = await ok(db_url, "app", "list")
    assert isinstance(apps, list)
    by_id = {a["id"]: a for a in apps}
    assert (by_id["acme"]["max_endpoints"], by_id["acme"]["max_events_per_s"]) == (10, 2.5)
    assert (by_id["default"]["max_endpoints"], by_id["default"]["max_events_per_s"]) == (None, None)
    # A flag left out stays; `none` clears.
    doc = await ok(db_url, "app", "update", "acme", "--max-endpoints", "none")
    assert doc == {"id": "acme", "name": "Acme Inc", "max_endpoints": None, "max_events_per_s": 2.5}
    code, out, err = await cli(db_url, "app", "update", "acme", "--max-events-per-s", "0.001")
    assert code == 0 and err == ""
    assert out.strip() == "application acme (Acme Inc): max_endpoints none, max_events_per_s 0.001"
    code, out, _ = await cli(db_url, "app", "list")
    assert code == 0 and "max_events_per_s" in out and "0.001" in out


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("nope", "--max-endpoints", "1"), "no application nope"),
        (("Bad Id", "--max-endpoints", "1"), "app must be"),
        (("acme", "--max-endpoints", "-1"), "max_endpoints must be an integer from 0 to 1000000"),
        (("acme", "--max-endpoints", "1000001"), "max_endpoints must be an integer from 0 to"),
        (("acme", "--max-endpoints", "2.5"), "max_endpoints must be an integer from 0 to"),
        (("acme", "--max-endpoints", "many"), "max_endpoints must be an integer from 0 to"),
        (("acme", "--max-events-per-s", "0"), "max_events_per_s must be a number from 0.001 to"),
        (("acme", "--max-events-per-s", "0.0001"), "max_events_per_s must be a number from 0.001"),
        (("acme", "--max-events-per-s", "1000001"), "max_events_per_s must be a number from"),
        (("acme", "--max-events-per-s", "nan"), "max_events_per_s must be a number from"),
        (("acme", "--max-events-per-s", "inf"), "max_events_per_s must be a number from"),
        (("acme", "--max-events-per-s", "fast"), "max_events_per_s must be a number from"),
        (("acme", "--name", ""), "name must be 1-200 characters"),
    ],
    ids=lambda a: " ".join(a)[:40],
)
async def test_app_update_refuses_bad_values_in_one_line(
    db_url: str, conn: asyncpg.Connection, args: tuple[str, ...], words: str
) -> None:
    await ok(db_url, "app", "add", "acme")
    before = await conn.fetch("SELECT * FROM applications ORDER BY id")
    err = one_line_error(await cli(db_url, "app", "update", *args))
    assert words in err, err
    assert "1000000" in err or "max_" not in words  # the range, in full
    assert await conn.fetch("SELECT * FROM applications ORDER BY id") == before


async def test_the_operators_cli_is_not_held_to_the_quotas(
    db_url: str, conn: asyncpg.Connection
) -> None:
    """Quotas hold on the HTTP API (tests/integration/test_quotas.py);
    `endpoint add` and `enqueue` are the operator's own tools."""
    await ok(db_url, "app", "add", "acme")
    await ok(db_url, "app", "update", "acme", "--max-endpoints", "0", "--max-events-per-s", "0.001")
    for _ in range(2):
        await ok(db_url, "endpoint", "add", "--url", "https://acme.example/h", "--app", "acme")
    for n in range(3):
        sent = await ok(db_url, "enqueue", "--event-type", "t", "--payload", "{}",
                        "--event-id", f"e{n}", "--app", "acme")  # fmt: skip
        assert isinstance(sent, dict) and len(sent["deliveries"]) == 2
    assert await conn.fetchval("SELECT count(*) FROM webhook_queue") == 6
