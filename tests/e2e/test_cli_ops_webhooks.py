"""`dispatcher ops-webhook …` as a user runs it: the documents, the secret
shown once, one-line errors with exit 2, and the endpoint.* events an
operator's `endpoint` commands cause, delivered signed by a worker."""

from __future__ import annotations

import json
from typing import Any

import asyncpg
from standardwebhooks import Webhook

from tests.e2e.test_cli_apps import ok, one_line_error
from tests.helpers import cli, drain
from tests.receivers import Receiver


async def test_add_list_delete(db_url: str, conn: asyncpg.Connection, receiver: Receiver) -> None:
    await ok(db_url, "app", "add", "acme")
    op = await ok(db_url, "ops-webhook", "add", "--url", receiver.url("/ops"))
    assert isinstance(op, dict) and set(op) == {"id", "url", "secret", "event_types", "app"}
    assert op["app"] is None and op["event_types"] == [] and op["secret"].startswith("whsec_")
    secret = "whsec_" + "A" * 32
    acme = await ok(
        db_url, "ops-webhook", "add", "--url", receiver.url("/acme"), "--app", "acme",
        "--event-type", "endpoint.disabled", "message.attempt.exhausted", "--secret", secret,
    )  # fmt: skip
    assert isinstance(acme, dict)
    assert (acme["app"], acme["secret"]) == ("acme", secret)
    assert acme["event_types"] == ["endpoint.disabled", "message.attempt.exhausted"]

    every = await ok(db_url, "ops-webhook", "list")
    assert isinstance(every, list) and [w["id"] for w in every] == [op["id"], acme["id"]]
    assert all("secret" not in w for w in every)
    only = await ok(db_url, "ops-webhook", "list", "--app", "acme")
    assert isinstance(only, list) and [w["id"] for w in only] == [acme["id"]]
    code, out, _ = await cli(db_url, "ops-webhook", "list")
    assert code == 0 and "(operator)" in out and "acme" in out and secret not in out

    # Not endpoints: `endpoint list` does not show them.
    assert await ok(db_url, "endpoint", "list") == []

    gone = await ok(db_url, "ops-webhook", "delete", str(acme["id"]))
    assert gone == {"id": acme["id"], "deleted": True}
    left = await ok(db_url, "ops-webhook", "list")
    assert isinstance(left, list) and [w["id"] for w in left] == [op["id"]]


async def test_errors_are_one_line_exit_2(db_url: str, receiver: Receiver) -> None:
    url = receiver.url("/ops")
    err = one_line_error(
        await cli(db_url, "ops-webhook", "add", "--url", url, "--event-type", "order.created")
    )
    assert "not an operational event type" in err
    err = one_line_error(await cli(db_url, "ops-webhook", "add", "--url", url, "--app", "nope"))
    assert "nope" in err
    one_line_error(await cli(db_url, "ops-webhook", "add", "--url", "ftp://x.example/"))
    one_line_error(await cli(db_url, "ops-webhook", "add", "--url", url, "--secret", "s3cret"))
    err = one_line_error(await cli(db_url, "ops-webhook", "delete", "9000000001"))
    assert "no ops webhook with id 9000000001" in err
    one_line_error(await cli(db_url, "ops-webhook", "list", "--app", "nope"))
    one_line_error(await cli(db_url, "ops-webhook", "add"))  # --url is required


async def test_endpoint_commands_are_announced(
    db_url: str, conn: asyncpg.Connection, receiver: Receiver
) -> None:
    op = await ok(db_url, "ops-webhook", "add", "--url", receiver.url("/ops"))
    assert isinstance(op, dict)
    ep = await ok(db_url, "endpoint", "add", "--url", receiver.url("/x"))
    assert isinstance(ep, dict)
    eid = str(ep["id"])
    code, _, err = await cli(db_url, "endpoint", "disable", eid)
    assert code == 0, err
    code, _, err = await cli(db_url, "endpoint", "delete", eid)
    assert code == 0, err
    await drain(db_url)
    got: list[dict[str, Any]] = []
    for r in receiver.requests_to("/ops"):
        headers = {k.lower(): v for k, v in r.headers.items()}
        got.append(Webhook(op["secret"]).verify(r.body, headers))
    assert [(d["type"], d["data"].get("reason")) for d in got] == [
        ("endpoint.created", None),
        ("endpoint.disabled", "operator"),
        ("endpoint.deleted", None),
    ]
    assert {d["data"]["endpointId"] for d in got} == {eid}
    assert json.loads(receiver.requests_to("/ops")[0].body)["data"]["appId"] == "default"
