"""Data access for applications (tenants), their quotas and credentials.

Credentials arrive here as digests (ops.tenancy.digest): the plaintext
never reaches the database.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from dispatcher.core.errors import Conflict, UnknownApplication
from dispatcher.db import Conn, Q


async def add_application(conn: Conn, app: str, name: str) -> dict[str, Any]:
    row = await conn.fetchrow(Q["insert_application"], app, name)
    if row is None:
        raise Conflict(f"application {app} already exists")
    return dict(row)


async def require_applications(conn: Conn, apps: Sequence[str]) -> None:
    if apps:
        known = {r["id"] for r in await conn.fetch(Q["application_ids"], list(apps))}
        unknown = [a for a in apps if a not in known]
        if unknown:
            raise UnknownApplication(f"no application {unknown[0]}")


async def list_applications(conn: Conn, app: str | None = None) -> list[dict[str, Any]]:
    return [dict(r) for r in await conn.fetch(Q["list_applications"], app)]


async def update_application(
    conn: Conn, app: str, name: str | None, quotas: dict[str, int | float | None]
) -> dict[str, Any]:
    """`quotas`: the ones that change (None clears one)."""
    row = await conn.fetchrow(
        Q["update_application"], app, name,
        "max_endpoints" in quotas, quotas.get("max_endpoints"),
        "max_events_per_s" in quotas, quotas.get("max_events_per_s"),
    )  # fmt: skip
    if row is None:
        raise UnknownApplication(f"no application {app}")
    return dict(row)


async def take_event_tokens(
    conn: Conn, app: str | None, n: int, endpoint_id: int | None = None
) -> float | None:
    """None when `n` events may be enqueued now (taken from the quota of the
    application `enqueue` would queue them in, if it has one); else the
    seconds until they may."""
    row = await conn.fetchrow(Q["take_event_tokens"], app, float(n), endpoint_id)
    return None if row is None or row["granted"] else max(0.0, float(row["wait_s"]))


async def take_test_shot(conn: Conn, app: str, lease_s: float) -> tuple[datetime | None, float]:
    """(the lease's end, 0) when `app` may send a test shot now; else (None,
    the seconds until the shot that is out ends at the latest)."""
    row = await conn.fetchrow(Q["take_test_shot"], app, lease_s)
    assert row is not None  # a SELECT of two scalars: always one row
    if row["lease"] is not None:
        return row["lease"], 0.0
    return None, max(0.0, float(row["wait_s"] or 0.0))


async def end_test_shot(conn: Conn, app: str, lease: datetime) -> None:
    await conn.execute(Q["end_test_shot"], app, lease)


async def add_token(conn: Conn, app: str, digest: bytes, ttl_s: float | None) -> datetime | None:
    row = await conn.fetchrow(Q["insert_token"], app, digest, ttl_s)
    if row is None:
        raise UnknownApplication(f"no application {app}")
    expires: datetime | None = row["expires_at"]
    return expires


async def token_application(conn: Conn, digest: bytes) -> tuple[str, bytes, bool] | None:
    """(application, stored digest, live) of a token, or None if unknown."""
    row = await conn.fetchrow(Q["token_application"], digest)
    return None if row is None else (row["application_id"], bytes(row["token_hash"]), row["live"])


async def revoke_token(conn: Conn, digest: bytes) -> str | None:
    return await conn.fetchval(Q["revoke_token"], digest)  # type: ignore[no-any-return]


async def add_portal_code(
    conn: Conn, app: str, digest: bytes, ttl_s: float, minted_by: bytes | None = None
) -> datetime | None:
    """The code's expiry. `minted_by`, the digest of the application token
    that asks: the code dies with it; None when that token is no longer
    live (or not this application's). An unknown application: UnknownApplication."""
    expires: datetime | None = await conn.fetchval(
        Q["insert_portal_code"], digest, app, ttl_s, minted_by
    )
    if expires is None and minted_by is None:
        raise UnknownApplication(f"no application {app}")
    return expires


async def use_portal_code(conn: Conn, digest: bytes) -> tuple[str, bytes, int | None] | None:
    """(application, stored digest, the minting token's id or None)."""
    row = await conn.fetchrow(Q["use_portal_code"], digest)
    if row is None:
        return None
    return row["application_id"], bytes(row["code_hash"]), row["token_id"]


async def add_portal_session(
    conn: Conn, app: str, digest: bytes, ttl_s: float, token_id: int | None = None
) -> None:
    await conn.execute(Q["insert_portal_session"], digest, app, ttl_s, token_id)


async def revoke_portal(conn: Conn, app: str) -> tuple[int, int]:
    """(codes, sessions) ended: every one of the application's."""
    row = await conn.fetchrow(Q["revoke_portal"], app)
    if row is None:
        raise UnknownApplication(f"no application {app}")
    return int(row["codes"]), int(row["sessions"])


async def portal_session_application(conn: Conn, digest: bytes) -> tuple[str, bytes] | None:
    row = await conn.fetchrow(Q["portal_session_application"], digest)
    return None if row is None else (row["application_id"], bytes(row["session_hash"]))


async def end_portal_session(conn: Conn, digest: bytes) -> None:
    await conn.execute(Q["delete_portal_session"], digest)


async def prune_portal(conn: Conn, after_s: float | None = 86_400.0) -> None:
    """Portal codes and sessions `after_s` past their expiry (None: kept)."""
    await conn.execute(Q["prune_portal"], after_s)
