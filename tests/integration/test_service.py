"""The service layer's operations, called as the CLI and the admin API call them."""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest

from dispatcher.core.errors import BadInput, UnknownEndpoint
from dispatcher.core.secretbox import SecretBox
from dispatcher.db import catalog, columns
from dispatcher.ops import reports, service
from dispatcher.ops.inputs import spec_from_fields

PUBLIC_KEYS = ["id", "app", "name", "url", "kind", "description", "event_types", "rate_per_s",
               "burst", "max_in_flight", "timeout_ms", "max_attempts", "retry_base_ms",
               "retry_cap_ms", "failure_threshold", "cooldown_s", "headers", "method", "body",
               "success_body",
               "filter", "ordering", "ordering_key", "client_cert", "client_key", "macro_style",
               "value_map", "disable_after", "disable_within_s", "enabled",
               "disabled_reason", "created_at", "updated_at"]  # fmt: skip


async def _add(conn: asyncpg.Connection, **fields: Any) -> dict[str, Any]:
    spec = spec_from_fields({"url": "https://example.com/hook", **fields})
    return await service.add_endpoint(conn, spec)


async def test_public_view_shows_the_secret_only_when_made(conn: asyncpg.Connection) -> None:
    added = await _add(conn)
    assert list(added) == [*PUBLIC_KEYS, "secret"]
    signing = await service.add_endpoint(
        conn, spec_from_fields({"url": "https://example.com/b"}), signature="v1a"
    )
    assert list(signing) == [*PUBLIC_KEYS, "secret", "public_key"]
    assert [list(e) for e in await service.list_endpoints(conn)] == [PUBLIC_KEYS, PUBLIC_KEYS]
    assert list(await service.get_endpoint(conn, added["id"])) == PUBLIC_KEYS
    rotated = await service.rotate_secret(conn, added["id"])
    assert list(rotated) == [*PUBLIC_KEYS, "secret", "grace_s"]
    assert rotated["grace_s"] == service.DEFAULT_GRACE_S


async def test_update_merges_the_patch_over_the_stored_endpoint(conn: asyncpg.Connection) -> None:
    eid = (await _add(conn, rate_per_s=5, headers={"X-A": "1"}, max_attempts=3))["id"]
    doc = await service.update_endpoint(conn, eid, {"timeout_ms": 5000})
    assert doc["timeout_ms"] == 5000 and doc["rate_per_s"] == 5.0
    assert doc["headers"] == {"X-A": service.HEADER_MASK} and doc["max_attempts"] == 3
    assert (await catalog.get_endpoint(conn, eid)).headers == (("X-A", "1"),)
    doc = await service.update_endpoint(conn, eid, {"rate_per_s": None})
    assert doc["rate_per_s"] is None and doc["timeout_ms"] == 5000
    for bad in ({"max_attempts": 0}, {"secret": "whsec_x"}, {"enabled": False}, {"nope": 1},
                {"url": "ftp://example.com"}):  # fmt: skip
        with pytest.raises(BadInput):
            await service.update_endpoint(conn, eid, bad)
    assert (await service.get_endpoint(conn, eid))["max_attempts"] == 3
    with pytest.raises(UnknownEndpoint):
        await service.update_endpoint(conn, 999, {"timeout_ms": 5000})


async def test_rotation_reads_the_scheme_through_the_seal(conn: asyncpg.Connection) -> None:
    box = SecretBox("k3y")
    spec = spec_from_fields({"url": "https://example.com/hook"})
    eid = (await service.add_endpoint(conn, spec, signature="v1a", box=box))["id"]
    assert (await catalog.get_endpoint(conn, eid)).sealed_secret.startswith("enc:v1:")
    rotated = await service.rotate_secret(conn, eid, 0, box)
    assert rotated["secret"].startswith("whsk_") and rotated["grace_s"] == 0
    for grace in (-1, "1", True, 2.0**40):
        with pytest.raises(BadInput):
            await service.rotate_secret(conn, eid, grace, box)  # type: ignore[arg-type]


async def test_replay_checks_and_caps(conn: asyncpg.Connection) -> None:
    eid = (await _add(conn))["id"]
    await catalog.enqueue_bulk(conn, [(f"e{i}", "t", "{}", None) for i in range(3)])
    await conn.execute("UPDATE webhook_queue SET status = 'dead_letter'")
    with pytest.raises(BadInput):
        await service.replay(conn, ids=[1], endpoint_id=eid)
    with pytest.raises(BadInput):
        await service.replay(conn)
    with pytest.raises(BadInput):
        await service.replay(conn, endpoint_id=eid, since="yesterday")
    with pytest.raises(BadInput):
        await service.replay(conn, endpoint_id=eid, limit=0)
    done = await service.replay(conn, endpoint_id=eid, limit=2, since="2000-01-01T00:00:00Z")
    assert (done.requeued, done.limit_reached) == (2, True)
    done = await service.replay(conn, endpoint_id=eid)
    assert (done.requeued, done.limit_reached) == (1, False)
    assert (await service.replay(conn, ids=[])).requeued == 0


async def test_report_defaults_and_limits(conn: asyncpg.Connection) -> None:
    doc = await reports.timeline(conn)
    span_s = reports.DEFAULT_TIMELINE_MINUTES * 60
    assert doc["bucket_s"] == span_s / reports.TIMELINE_POINTS
    assert len(doc["points"]) == reports.TIMELINE_POINTS
    for bad in (0, -1, 24 * 366):
        with pytest.raises(BadInput):
            await reports.dlq_analyze(conn, bad)
    with pytest.raises(BadInput):
        await reports.timeline(conn, 0)
    with pytest.raises(BadInput):
        await reports.dead_letters(conn, None, 0)
    with pytest.raises(BadInput):
        await reports.deliveries_for_event(conn, "")
    assert await reports.dead_letters(conn) == []


async def test_header_values_are_sealed_masked_and_kept(conn: asyncpg.Connection) -> None:
    box = SecretBox("k3y")
    spec = spec_from_fields({"url": "https://example.com/h", "headers": {"X-Api-Key": "s3cr3t"}})
    added = await service.add_endpoint(conn, spec, box=box)
    assert added["headers"] == {"X-Api-Key": service.HEADER_MASK}
    eid = added["id"]
    raw = await conn.fetchval("SELECT headers::text FROM endpoints WHERE id = $1", eid)
    assert "s3cr3t" not in raw and "enc:v1:" in raw and "X-Api-Key" in raw
    stored = (await catalog.get_endpoint(conn, eid)).headers
    assert columns.unseal_headers(box, stored) == (("X-Api-Key", "s3cr3t"),)
    # An update that does not name headers keeps them, byte for byte.
    await service.update_endpoint(conn, eid, {"timeout_ms": 4000}, box=box)
    assert (await catalog.get_endpoint(conn, eid)).headers == stored
    # The mask sent back keeps a value; a new value is sealed too.
    doc = await service.update_endpoint(
        conn, eid, {"headers": {"X-Api-Key": service.HEADER_MASK, "X-New": "v2"}}, box=box
    )
    assert doc["headers"] == {"X-Api-Key": service.HEADER_MASK, "X-New": service.HEADER_MASK}
    now = (await catalog.get_endpoint(conn, eid)).headers
    assert dict(now)["X-Api-Key"] == dict(stored)["X-Api-Key"]
    assert dict(columns.unseal_headers(box, now))["X-New"] == "v2"
    with pytest.raises(BadInput):
        await service.update_endpoint(conn, eid, {"headers": {"X-Other": service.HEADER_MASK}})
    for listed in await service.list_endpoints(conn):
        assert "s3cr3t" not in str(listed) and "v2" not in str(listed.values())


async def test_update_checks_the_url_like_add(conn: asyncpg.Connection) -> None:
    from dispatcher.core.ssrf import TargetPolicy

    strict = TargetPolicy()
    spec = spec_from_fields({"url": "https://example.com/h"})
    eid = (await service.add_endpoint(conn, spec, targets=strict))["id"]
    for url in ("http://xn--zz.example/hook", "http://127.1/", "http://2130706433/",
                "http://[::1]/", "http://10.0.0.1/"):  # fmt: skip
        with pytest.raises(BadInput):
            await service.add_endpoint(conn, spec_from_fields({"url": url}), targets=strict)
        with pytest.raises(BadInput):
            await service.update_endpoint(conn, eid, {"url": url}, targets=strict)
    assert (await service.get_endpoint(conn, eid))["url"] == "https://example.com/h"
