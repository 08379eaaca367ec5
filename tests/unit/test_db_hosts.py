"""Multi-host database URLs, read as libpq reads them: split per host,
connect_timeout taken out, error messages and rewritten URLs naming every
host."""

from __future__ import annotations

import pytest

from dispatcher.db import hosts, where
from dispatcher.db.embedded import redact, with_database

PAIR = "postgresql://app:s3cret@pg-1:5432,pg-2:5433/app?target_session_attrs=read-write"


def test_one_host_is_left_as_written() -> None:
    url = "postgresql://u@h/db?sslmode=require&application_name=a%20b"
    assert hosts.target(url) == hosts.Target(urls=(url,), connect_timeout=None)


def test_hosts_in_the_netloc_become_one_url_each() -> None:
    t = hosts.target(PAIR + "&connect_timeout=3")
    assert t.urls == (
        "postgresql://app:s3cret@pg-1:5432/app?target_session_attrs=read-write",
        "postgresql://app:s3cret@pg-2:5433/app?target_session_attrs=read-write",
    )
    assert t.connect_timeout == 3.0


def test_hosts_in_the_query_pair_with_their_ports() -> None:
    t = hosts.target("postgresql://u@/db?host=a,b&port=1,2&target_session_attrs=primary")
    assert t.urls == (
        "postgresql://u@/db?target_session_attrs=primary&host=a&port=1",
        "postgresql://u@/db?target_session_attrs=primary&host=b&port=2",
    )
    # One port for every host.
    assert hosts.hosts("postgresql://u@/db?host=a,b&port=6432") == ["a:6432", "b:6432"]


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("0", None), ("-1", None), ("1", 2.0), ("10", 10.0), ("", None)],
)
def test_connect_timeout_as_libpq_reads_it(value: str, seconds: float | None) -> None:
    t = hosts.target(f"postgresql://u@h/db?connect_timeout={value}")
    assert t.connect_timeout == seconds
    assert t.urls == ("postgresql://u@h/db",)  # never sent to the server


def test_sockets_and_ipv6_hosts() -> None:
    assert hosts.hosts("postgresql://u@%2Fvar%2Frun,[::1]:5433,[::2]/db") == [
        "/var/run", "[::1]:5433", "[::2]"
    ]  # fmt: skip
    assert len(hosts.target("postgresql://u@[::1]:5433,[::2]/db").urls) == 2


def test_where_names_every_host_never_the_password() -> None:
    assert where(PAIR) == "pg-1:5432,pg-2:5433, database app"
    assert where("postgresql://u@a,b:6000/d") == "a:5432,b:6000, database d"
    assert where("postgresql://u@/d?host=a,b&port=1,2") == "a:1,b:2, database d"
    assert where("postgresql://u@/d?host=/tmp") == "socket /tmp/.s.PGSQL.5432, database d"
    assert "s3cret" not in where(PAIR)


def test_rewrites_keep_every_host() -> None:
    assert with_database(PAIR, "other") == PAIR.replace("/app?", "/other?")
    assert redact(PAIR) == PAIR.replace("s3cret", "***")
