"""A database URL that names several hosts, read as libpq reads it.

`postgresql://u@h1:5432,h2:5432/db?target_session_attrs=read-write` (or
`?host=h1,h2&port=5432,5433`) names the nodes of one cluster; a connection
goes to the first that answers and matches `target_session_attrs`. asyncpg
accepts the syntax but spends one timeout on all the hosts together, so a
first host that swallows packets (a node powered off, a partition) uses it
up and the second is never tried; and it sends libpq's `connect_timeout` to
the server as a setting, which refuses it. Here a URL becomes one URL per
host, each tried with a timeout of its own (`connect_timeout`, when the URL
gives one, is that timeout, as in libpq).

Pure string work: never opens a connection (dispatcher.db does, with these).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

# libpq parameters the client acts on; asyncpg would pass them to the
# server as settings, which it refuses ("unrecognized configuration parameter").
CLIENT_ONLY = ("connect_timeout",)


@dataclass(frozen=True, slots=True, kw_only=True)
class Target:
    """The hosts of a URL, one URL each, in the order given, and the
    per-host connect timeout the URL asks for (None: the caller's)."""

    urls: tuple[str, ...]
    connect_timeout: float | None


def _query(url: str) -> list[tuple[str, str]]:
    return parse_qsl(urlsplit(url).query, keep_blank_values=True)


def hosts(url: str) -> list[str]:
    """`host[:port]` (or a socket folder) for each host the URL names, as written."""
    parts = urlsplit(url)
    query = dict(_query(url))
    if query.get("host"):
        names = query["host"].split(",")
        ports = query.get("port", "").split(",") if query.get("port") else []
        if len(ports) == 1:
            ports *= len(names)
        return [f"{n}:{ports[i]}" if i < len(ports) else n for i, n in enumerate(names)]
    hostspec = parts.netloc.rpartition("@")[2]
    named = [unquote(h) for h in hostspec.split(",")] if hostspec else []
    port = query.get("port", "")
    return [h if not port or _has_port(h) else f"{h}:{port}" for h in named]


def _has_port(host: str) -> bool:
    return not host.endswith("]") and host.rpartition(":")[2].isdigit() and ":" in host


def target(url: str) -> Target:
    """The URL split per host (libpq's multi-host syntax in the netloc or in
    `?host=…&port=…`), with libpq's client-only parameters taken out."""
    parts = urlsplit(url)
    query = _query(url)
    params = dict(query)
    if (
        "," not in parts.netloc
        and "," not in params.get("host", "")
        and not any(k in CLIENT_ONLY for k in params)
    ):
        return Target(urls=(url,), connect_timeout=None)  # as given, not re-encoded
    timeout = None
    for key, value in query:
        if key == "connect_timeout" and value.strip():
            # libpq: zero, negative or absent means wait indefinitely; the
            # caller's timeout then stands. Under 2 s libpq uses 2.
            seconds = float(value)
            timeout = max(seconds, 2.0) if seconds > 0 else None
    kept = [(k, v) for k, v in query if k not in CLIENT_ONLY]
    base = parts._replace(query=urlencode(kept, safe=",/:"))
    params = dict(kept)
    if params.get("host"):
        names = params["host"].split(",")
        ports = params["port"].split(",") if params.get("port") else []
        if len(ports) == 1:
            ports *= len(names)
        urls = []
        for i, name in enumerate(names):
            one = [(k, v) for k, v in kept if k not in ("host", "port")]
            one.append(("host", name))
            if i < len(ports) and ports[i]:
                one.append(("port", ports[i]))
            urls.append(urlunsplit(base._replace(query=urlencode(one, safe=",/:"))))
        return Target(urls=tuple(urls), connect_timeout=timeout)
    userinfo, at, hostspec = parts.netloc.rpartition("@")
    specs = hostspec.split(",") if "," in hostspec else [hostspec]
    urls = [urlunsplit(base._replace(netloc=f"{userinfo}{at}{spec}")) for spec in specs]
    return Target(urls=tuple(urls), connect_timeout=timeout)
