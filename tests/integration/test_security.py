"""Signing, rotation, secrets at rest, SSRF and privacy, end to end."""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import sys
from dataclasses import replace

import asyncpg
import pytest
from aiohttp.abc import AbstractResolver, ResolveResult
from standardwebhooks import Webhook as StandardWebhook
from svix.webhooks import Webhook as SvixWebhook

from dispatcher import enqueue
from dispatcher.core.models import WakeMode
from dispatcher.core.signing import generate_signing_key, public_key
from dispatcher.db import wake
from dispatcher.ops.reports import dlq_analyze
from dispatcher.ops.service import rotate_secret
from dispatcher.receiver import VerificationError, verify
from dispatcher.worker.engine import Engine
from dispatcher.worker.sender import Sender
from tests.helpers import FAST, add_endpoint, admin_api, cli, cli_env, drain
from tests.receivers import Receiver, status


def _headers(r: object) -> dict[str, str]:
    return {k.lower(): v for k, v in r.headers.items()}  # type: ignore[attr-defined]


def _verifies(key: str, body: bytes, headers: dict[str, str]) -> bool:
    """dispatcher's receiver kit, holding `key` (a whsec_ secret or a whpk_ public key)."""
    try:
        verify(body, headers, key)
    except VerificationError:
        return False
    return True


def _accepts(secret: str, body: bytes, headers: dict[str, str]) -> bool:
    """Both public verifiers must agree."""
    results = []
    for verifier in (StandardWebhook(secret), SvixWebhook(secret)):
        try:
            verifier.verify(body, headers)
            results.append(True)
        except Exception:
            results.append(False)
    assert results[0] == results[1], results
    return results[0]


async def test_rotation_with_public_verifiers(conn: asyncpg.Connection, db_url: str,
                                              receiver: Receiver) -> None:  # fmt: skip
    eid, s1 = await add_endpoint(conn, receiver.url("/ok"))
    await enqueue(conn, "t", {"n": 1}, "before")
    await drain(db_url)
    s2 = (await rotate_secret(conn, eid, 3600))["secret"]
    await enqueue(conn, "t", {"n": 2}, "during")
    await drain(db_url)
    s3 = (await rotate_secret(conn, eid, 0))["secret"]
    await enqueue(conn, "t", {"n": 3}, "after")
    await drain(db_url)
    before, during, after = receiver.received
    hb, hd, ha = _headers(before), _headers(during), _headers(after)
    assert len(hb["webhook-signature"].split()) == 1
    assert len(hd["webhook-signature"].split()) == 2
    assert _accepts(s1, before.body, hb) and not _accepts(s2, before.body, hb)
    assert _accepts(s1, during.body, hd) and _accepts(s2, during.body, hd)
    # grace 0: s2 stops signing at once; s1 keeps its own grace from the first rotation
    assert len(ha["webhook-signature"].split()) == 2
    assert _accepts(s3, after.body, ha) and _accepts(s1, after.body, ha)
    assert not _accepts(s2, after.body, ha)
    assert not _accepts(s3, after.body + b" ", ha)  # a tampered body


async def test_a_running_worker_signs_with_the_secret_rotated_just_before(
    conn: asyncpg.Connection, db_url: str, receiver: Receiver
) -> None:
    """A worker already running (woken by NOTIFY, not started afresh) reads
    the rotation before it claims the event enqueued right after it: the
    claim waits for the refresh the change asked for, rather than racing
    it (the Svix SDK test lost that race under load)."""
    eid, _ = await add_endpoint(conn, receiver.url("/ok"))
    await wake.write(conn, WakeMode.NOTIFY)  # the enqueue wakes the claim at once
    e = Engine(replace(FAST, endpoint_refresh_s=60), db_url)
    worker = asyncio.create_task(e.run())
    try:
        for i in range(10):
            secret = (await rotate_secret(conn, eid, 3600))["secret"]
            await enqueue(conn, "t", {"n": i}, f"rot{i}")
            async with asyncio.timeout(15):
                while len(receiver.received) <= i:
                    await asyncio.sleep(0.01)
            got = receiver.received[i]
            assert _accepts(secret, got.body, _headers(got)), i
    finally:
        e.stop()
        await asyncio.wait_for(worker, 30)


async def test_grace_period_ends(conn: asyncpg.Connection, db_url: str, receiver: Receiver) -> None:
    eid, s1 = await add_endpoint(conn, receiver.url("/ok"))
    s2 = (await rotate_secret(conn, eid, 3600))["secret"]
    await conn.execute("UPDATE endpoint_secrets SET expires_at = now() - interval '1 second'")
    await enqueue(conn, "t", {}, "late")
    await drain(db_url)
    [got] = receiver.received
    h = _headers(got)
    assert len(h["webhook-signature"].split()) == 1
    assert _accepts(s2, got.body, h) and not _accepts(s1, got.body, h)


async def test_secrets_encrypted_at_rest(conn: asyncpg.Connection, db_url: str,
                                         receiver: Receiver) -> None:  # fmt: skip
    code, out, err = await cli(db_url, "endpoint", "add", "--url", receiver.url("/ok"), "--json",
                               env=cli_env(db_url, DISPATCHER_SECRET_KEY="k3y"))  # fmt: skip
    assert code == 0, err
    import json

    secret = json.loads(out)["secret"]
    stored = await conn.fetchval("SELECT secret FROM endpoints")
    assert stored.startswith("enc:v1:") and secret not in stored
    await enqueue(conn, "t", {}, "enc")
    code, _, err = await cli(db_url, "run", "--drain")
    assert code == 1 and "DISPATCHER_SECRET_KEY" in err and "Traceback" not in err
    assert receiver.received == []
    await drain(db_url, secret_key="k3y")
    [got] = receiver.received
    assert _accepts(secret, got.body, _headers(got))
    code, out, _ = await cli(db_url, "endpoint", "list", "--json")
    assert secret not in out and "enc:v1:" not in out


async def test_v1a_ed25519(conn: asyncpg.Connection, db_url: str, receiver: Receiver) -> None:
    sk = generate_signing_key()
    await add_endpoint(conn, receiver.url("/ok"), secret=sk)
    await enqueue(conn, "t", {"x": 1}, "asym")
    await drain(db_url)
    [got] = receiver.received
    h = _headers(got)
    assert h["webhook-signature"].startswith("v1a,")
    pk = public_key(sk)
    assert _verifies(pk, got.body, h)
    assert not _verifies(pk, got.body + b"x", h)
    assert not _verifies(public_key(generate_signing_key()), got.body, h)
    _, out, _ = await cli(db_url, "endpoint", "add", "--url", "https://example.com/x",
                          "--signature", "v1a", "--json")  # fmt: skip
    import json

    doc = json.loads(out)
    assert doc["secret"].startswith("whsk_") and doc["public_key"].startswith("whpk_")
    assert len(base64.b64decode(doc["public_key"][5:])) == 32


@pytest.mark.parametrize("scheme", ["v1", "v1a"])
@pytest.mark.parametrize("sealed", [False, True], ids=["plain", "encrypted"])
@pytest.mark.parametrize("via", ["cli", "api"])
async def test_rotation_keeps_the_scheme(conn: asyncpg.Connection, db_url: str,
                                         receiver: Receiver, scheme: str, sealed: bool,
                                         via: str) -> None:  # fmt: skip
    """rotate-secret (CLI and API, secrets encrypted at rest or not) gives a new
    secret of the endpoint's own scheme, and a receiver still holding the old
    key (whsec_, or the whpk_ public key) keeps verifying during the grace."""
    key = "k3y" if sealed else None
    env = cli_env(db_url, DISPATCHER_SECRET_KEY="k3y") if sealed else cli_env(db_url)
    code, out, err = await cli(db_url, "endpoint", "add", "--url", receiver.url("/ok"),
                               "--signature", scheme, "--json", env=env)  # fmt: skip
    assert code == 0, err
    added = json.loads(out)
    stored = await conn.fetchval("SELECT secret FROM endpoints")
    assert stored.startswith("enc:v1:") == sealed
    if via == "cli":
        code, out, err = await cli(db_url, "endpoint", "rotate-secret", str(added["id"]),
                                   "--json", env=env)  # fmt: skip
        assert code == 0, err
        rotated = json.loads(out)
    else:
        async with admin_api(db_url, replace(FAST, secret_key=key)) as (s, base):
            url = f"{base}/v1/endpoints/{added['id']}/rotate-secret"
            async with s.post(url, json={}) as r:
                assert r.status == 200, await r.text()
                rotated = await r.json()
    prefix = "whsk_" if scheme == "v1a" else "whsec_"
    assert rotated["secret"].startswith(prefix) and rotated["secret"] != added["secret"]
    assert ("public_key" in rotated) == (scheme == "v1a")
    assert rotated["grace_s"] == 86_400
    assert (await conn.fetchval("SELECT secret FROM endpoints")).startswith("enc:v1:") == sealed
    old_key = added.get("public_key", added["secret"])
    new_key = rotated.get("public_key", rotated["secret"])
    await enqueue(conn, "t", {"n": 1}, "after-rotation")
    await drain(db_url, secret_key=key)
    [got] = receiver.received
    h = _headers(got)
    entries = h["webhook-signature"].split()
    assert len(entries) == 2 and all(e.startswith(f"{scheme},") for e in entries)
    assert _verifies(old_key, got.body, h) and _verifies(new_key, got.body, h)


async def test_custom_headers(conn: asyncpg.Connection, db_url: str, receiver: Receiver) -> None:
    code, _, err = await cli(
        db_url,
        "endpoint",
        "add",
        "--url",
        receiver.url("/ok"),
        "--header",
        "X-Api-Key: abc123",
        "--header",
        "X-Tenant: 7",
    )
    assert code == 0, err
    bad_headers = ("Webhook-Signature: x", "X-Evil: a\rb", "Content-Type: x", "nocolon")
    for bad in bad_headers:
        code, _, err = await cli(db_url, "endpoint", "add", "--url", receiver.url("/x"),
                                 "--header", bad)  # fmt: skip
        assert code == 2 and "Traceback" not in err, (bad, err)
    await enqueue(conn, "t", {}, "hdr")
    await drain(db_url)
    [got] = receiver.received
    h = _headers(got)
    assert h["x-api-key"] == "abc123" and h["x-tenant"] == "7"
    assert h["content-type"] == "application/json"


async def test_payload_size_limit(conn: asyncpg.Connection, db_url: str) -> None:
    await add_endpoint(conn, "https://example.com/x")
    big = '{"blob": "' + "a" * (256 * 1024) + '"}'
    small_limit = cli_env(db_url, DISPATCHER_MAX_PAYLOAD_BYTES="1000")
    over = '{"b": "' + "a" * 1000 + '"}'
    code, _, err = await cli(
        db_url, "enqueue", "--event-type", "t", "--payload", over, env=small_limit
    )
    assert code == 2 and "over the limit" in err
    code, _, err = await cli(db_url, "enqueue", "--event-type", "t", "--payload", '{"a": 1}',
                             env=cli_env(db_url, DISPATCHER_MAX_PAYLOAD_BYTES="4"))  # fmt: skip
    assert code == 2
    with pytest.raises(asyncpg.InvalidParameterValueError):
        await conn.fetchval("SELECT dispatcher_enqueue('t', $1::json, 'big')", big)
    assert await conn.fetchval("SELECT count(*) FROM webhook_queue") == 0


class FakeResolver(AbstractResolver):
    """Answers from a table; a list of answers is served one per call (rebinding)."""

    def __init__(self, answers: dict[str, list[list[str]]]) -> None:
        self.answers = answers
        self.calls: dict[str, int] = {}

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        n = self.calls.get(host, 0)
        self.calls[host] = n + 1
        seq = self.answers[host]
        addrs = seq[min(n, len(seq) - 1)]
        return [
            {"hostname": host, "host": a, "port": port,
             "family": socket.AF_INET6 if ":" in a else socket.AF_INET, "proto": 0, "flags": 0}
            for a in addrs
        ]  # fmt: skip

    async def close(self) -> None:
        pass


def _engine(db_url: str, resolver: AbstractResolver, **kw: object) -> Engine:
    settings = replace(FAST, allow_private_targets=False, **kw)  # type: ignore[arg-type]
    sender = Sender(allow_private=False, allowed_networks=settings.allowed_networks,
                    resolver=resolver)  # fmt: skip
    return Engine(settings, db_url, sender=sender)


async def test_names_resolving_to_private_addresses_are_refused(
    conn: asyncpg.Connection, db_url: str, receiver: Receiver
) -> None:
    p = receiver.port
    resolver = FakeResolver({
        "loop.test": [["127.0.0.1"]], "meta.test": [["169.254.169.254"]],
        "ten.test": [["10.1.2.3"]], "v6.test": [["::1"]], "mapped.test": [["::ffff:127.0.0.1"]],
        "mixed.test": [["127.0.0.1", "::1"]],
    })  # fmt: skip
    for name in resolver.answers:
        await add_endpoint(conn, f"http://{name}:{p}/x")
    for literal in ("[::1]", "[::ffff:7f00:1]", "127.0.0.1", "0.0.0.0", "[64:ff9b::7f00:1]"):
        await add_endpoint(conn, f"http://{literal}:{p}/x")
    await enqueue(conn, "t", {}, "ssrf")
    await asyncio.wait_for(_engine(db_url, resolver).run(drain=True), 30)
    assert receiver.received == []
    rows = await conn.fetch("SELECT status, attempt_count, last_error FROM webhook_queue")
    assert len(rows) == 11
    for r in rows:
        assert r["status"] == "dead_letter" and r["attempt_count"] == 1
        assert r["last_error"].startswith("refused target:")
        assert "\n" not in r["last_error"]
    # dlq analyze names the cause and the setting, with a runnable replay.
    analysed = await dlq_analyze(conn)
    assert len(analysed) == 11
    for group in analysed:
        assert group["pattern"] == "refused-target"
        assert "DISPATCHER_ALLOW_PRIVATE_TARGETS=1" in group["suggested_action"]
        assert (
            f"dispatcher dlq replay --endpoint {group['endpoint_id']} --since"
            in (group["suggested_action"])
        )


async def _receiver_pair(first: str, second: str) -> tuple[Receiver, Receiver]:
    """Two receivers on one port of two addresses. The first's port is the
    kernel's pick, which another test's connection may hold on the second
    address: a few tries with another port, then the error."""
    for attempt in range(10):
        one = await Receiver().start_on(first)
        two = Receiver()
        try:
            return one, await two.start_on(second, one.port)
        except OSError:
            await two.stop()
            await one.stop()
            if attempt == 9:
                raise
    raise AssertionError("unreachable")


async def test_rebinding_cannot_redirect_a_vetted_connection(
    conn: asyncpg.Connection, db_url: str
) -> None:
    """The allow-list admits 127.0.0.2 only. The name answers 127.0.0.2 once,
    then 127.0.0.1: requests reach the vetted address and never the other."""
    allowed, forbidden = await _receiver_pair("127.0.0.2", "127.0.0.1")
    try:
        resolver = FakeResolver({"rebind.test": [["127.0.0.2"], ["127.0.0.1"]]})
        await add_endpoint(conn, f"http://rebind.test:{allowed.port}/x", max_in_flight=1,
                           retry_base_ms=0, retry_cap_ms=0, max_attempts=3)  # fmt: skip
        for i in range(3):
            await enqueue(conn, "t", {"i": i}, f"rb{i}")
        e = _engine(db_url, resolver, allowed_networks=("127.0.0.2/32",))
        await asyncio.wait_for(e.run(drain=True), 30)
    finally:
        await allowed.stop()
        await forbidden.stop()
    assert forbidden.received == []
    assert len(allowed.received) >= 1
    errors = await conn.fetch("SELECT last_error FROM webhook_queue WHERE status <> 'delivered'")
    assert all("refused target" in (r["last_error"] or "") for r in errors)


async def test_logs_never_carry_payloads(conn: asyncpg.Connection, db_url: str,
                                         receiver: Receiver) -> None:  # fmt: skip
    receiver.routes["/err"] = status(500)
    receiver.routes["/bad"] = status(400)
    await add_endpoint(conn, receiver.url("/ok"))
    await add_endpoint(conn, receiver.url("/err"), retry_base_ms=0, retry_cap_ms=0,
                       max_attempts=2, failure_threshold=1, cooldown_s=600)  # fmt: skip
    await add_endpoint(conn, receiver.url("/bad"))
    await add_endpoint(conn, "http://127.0.0.1:1/refused", max_attempts=1)
    values = {
        "click_id": "clk-SECRET-7781", "conversion_id": "conv-SECRET-5512",
        "transaction_id": "tx-SECRET-9931", "payout": 4242.17, "amount": 31337.5,
        "email": "someone.secret@example.org", "ip": "203.0.113.77",
    }  # fmt: skip
    for i in range(5):
        await enqueue(conn, "conversion", {**values, "n": i}, f"priv{i}")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "dispatcher", "run", "--drain",
        env=cli_env(db_url, DISPATCHER_LOG_LEVEL="debug", DISPATCHER_POLL_INTERVAL_S="0.2"),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0
    logs = (out + err).decode()
    assert "engine_started" in logs and "breaker_transition" in logs
    for v in values.values():
        assert str(v) not in logs
    stored = await conn.fetch("SELECT last_error FROM webhook_queue WHERE last_error IS NOT NULL")
    assert stored
    for r in stored:
        assert len(r["last_error"]) <= 300
        assert not any(str(v) in r["last_error"] for v in values.values())


async def test_header_values_sealed_at_rest_and_never_listed(
    conn: asyncpg.Connection, db_url: str, receiver: Receiver
) -> None:
    env = cli_env(db_url, DISPATCHER_SECRET_KEY="k3y")
    code, out, err = await cli(db_url, "endpoint", "add", "--url", receiver.url("/ok"), "--header",
                               "X-Api-Key: abc123-secret", "--json", env=env)  # fmt: skip
    assert code == 0, err
    assert json.loads(out)["headers"] == {"X-Api-Key": "••••"}
    stored = await conn.fetchval("SELECT headers::text FROM endpoints")
    assert "abc123-secret" not in stored and "enc:v1:" in stored
    for args in (("endpoint", "list", "--json"), ("endpoint", "list")):
        code, out, err = await cli(db_url, *args, env=env)
        assert code == 0 and "abc123-secret" not in out and "enc:v1:" not in out, err


async def test_sealed_header_values_are_sent_in_clear(
    conn: asyncpg.Connection, db_url: str, receiver: Receiver
) -> None:
    code, _, err = await cli(db_url, "endpoint", "add", "--url", receiver.url("/ok"), "--header",
                             "X-Api-Key: abc123-secret",
                             env=cli_env(db_url, DISPATCHER_SECRET_KEY="k3y"))  # fmt: skip
    assert code == 0, err
    await enqueue(conn, "t", {}, "sealed-hdr")
    await drain(db_url, secret_key="k3y")
    [got] = receiver.received
    assert _headers(got)["x-api-key"] == "abc123-secret"


@pytest.mark.parametrize(
    "url", ["http://localhost:8081/hook", "http://169.254.169.254/latest/meta-data",
            "http://[::ffff:127.0.0.1]/", "http://10.0.0.1/x"],
)  # fmt: skip
async def test_endpoint_add_refuses_private_targets_naming_the_setting(
    db_url: str, url: str, conn: asyncpg.Connection
) -> None:
    env = {**cli_env(db_url), "DISPATCHER_ALLOW_PRIVATE_TARGETS": "0"}
    code, _, err = await cli(db_url, "endpoint", "add", "--url", url, env=env)
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "DISPATCHER_ALLOW_PRIVATE_TARGETS=1" in err
    assert await conn.fetchval("SELECT count(*) FROM endpoints") == 0
    allowed = {**env, "DISPATCHER_ALLOW_PRIVATE_TARGETS": "1"}
    code, _, err = await cli(db_url, "endpoint", "add", "--url", url, env=allowed)
    assert code == 0, err


async def test_api_refuses_a_name_resolving_to_loopback_naming_the_setting(
    db_url: str, conn: asyncpg.Connection
) -> None:
    async with admin_api(db_url, replace(FAST, allow_private_targets=False)) as (s, base):
        async with s.post(f"{base}/v1/endpoints", json={"url": "http://localhost:9/x"}) as r:
            assert r.status == 400
            assert "DISPATCHER_ALLOW_PRIVATE_TARGETS=1" in (await r.json())["error"]
        # An update moving a public endpoint onto loopback is refused the same way.
        async with s.post(f"{base}/v1/endpoints", json={"url": "https://example.com/x"}) as r:
            assert r.status == 201, await r.text()
            created = await r.json()
        patch = {"url": "http://localhost/x"}
        async with s.patch(f"{base}/v1/endpoints/{created['id']}", json=patch) as r:
            assert r.status == 400
    assert await conn.fetchval("SELECT url FROM endpoints") == "https://example.com/x"


@pytest.mark.parametrize(
    "url", ["http://xn--zz.example/hook", "http://127.1/", "http://2130706433/",
            "http://0x7f000001/", "http://[::1]:9/", "http://1.2.3.999/"],
)  # fmt: skip
async def test_endpoint_add_refuses_what_the_sender_would_not_send(db_url: str, url: str) -> None:
    env = {**cli_env(db_url), "DISPATCHER_ALLOW_PRIVATE_TARGETS": "0"}
    code, _, err = await cli(db_url, "endpoint", "add", "--url", url, env=env)
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
