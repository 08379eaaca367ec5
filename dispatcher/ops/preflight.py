"""What a process checks about its configuration as it starts, to say at
once what would otherwise show up later as failed deliveries: enabled
endpoints whose address the SSRF guard refuses, and an admin token too
short for where it is served.

Reports only; it changes nothing, and no check here stops a worker but
the admin token's on a non-loopback address (the caller decides)."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from dispatcher.core.refusals import refused_host
from dispatcher.core.ssrf import TargetPolicy
from dispatcher.db import Conn, catalog

# A token this short can be guessed by a patient client (the sign-in
# throttle slows one address, not a botnet); 32 characters is what
# `secrets.token_urlsafe(24)`, our generated token, has.
MIN_ADMIN_TOKEN = 32


@dataclass(frozen=True, slots=True)
class RefusedTarget:
    endpoint_id: int
    name: str | None
    host: str


async def refused_targets(conn: Conn, policy: TargetPolicy) -> list[RefusedTarget]:
    """Enabled endpoints whose URL names an address the sender will refuse
    (core/refusals.py judges, without DNS, as a running worker does)."""
    out = []
    for e in await catalog.list_endpoints(conn, None):
        if not e.enabled:
            continue
        host = refused_host(e.url, policy, e.macro_style)
        if host is not None:
            out.append(RefusedTarget(e.id, e.name, host))
    return out


def is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def admin_token_problem(token: str | None, host: str, allow_weak: bool) -> tuple[str, bool]:
    """("", False) for a token that is fine; else the words and whether to
    refuse to serve: a short token is a warning on loopback (a developer's
    machine) or when allowed, a refusal on any other address."""
    if token is None or len(token) >= MIN_ADMIN_TOKEN:
        return "", False
    words = (
        f"DISPATCHER_ADMIN_TOKEN is {len(token)} characters; use {MIN_ADMIN_TOKEN} or more "
        "(`openssl rand -hex 16`)"
    )
    if is_loopback(host) or allow_weak:
        return words, False
    return (
        f"{words}: refusing to serve the admin API on {host}, which is not loopback "
        "(DISPATCHER_ALLOW_WEAK_ADMIN_TOKEN=1 serves it anyway)"
    ), True
