"""tests/unit (`make test-fast`): no database, no network beyond loopback.

tests/conftest.py fails a unit test that asks for a database; here, a
connection or a name lookup that would leave 127.0.0.1 / ::1 fails the test
that makes it instead of reaching out.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterator
from typing import Any

import pytest


def _loopback(host: object) -> bool:
    if host in (None, "localhost", b"localhost"):
        return True
    if isinstance(host, bytes):
        host = host.decode()
    try:
        return ipaddress.ip_address(str(host).split("%")[0]).is_loopback
    except ValueError:
        return False


def _check(sock: socket.socket, address: Any) -> None:
    if sock.family == socket.AF_UNIX:
        if ".s.PGSQL." in str(address):
            raise PermissionError(f"tests/unit connects to no database ({address})")
    elif isinstance(address, tuple) and not _loopback(address[0]):
        raise PermissionError(f"tests/unit connects to nothing beyond loopback ({address[0]})")


# Per test, not per session: a worker that steals work (xdist worksteal)
# runs unit tests between database tests, and the guard must not outlive them.
@pytest.fixture(autouse=True)
def _loopback_only() -> Iterator[None]:
    connect, connect_ex, getaddrinfo = (
        socket.socket.connect, socket.socket.connect_ex, socket.getaddrinfo,
    )  # fmt: skip

    def guarded_connect(self: socket.socket, address: Any) -> None:
        _check(self, address)
        connect(self, address)

    def guarded_connect_ex(self: socket.socket, address: Any) -> int:
        _check(self, address)
        return connect_ex(self, address)

    def guarded_getaddrinfo(host: Any, *args: Any, **kw: Any) -> Any:
        if not _loopback(host):
            raise PermissionError(f"tests/unit looks up no name beyond localhost ({host})")
        return getaddrinfo(host, *args, **kw)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(socket.socket, "connect", guarded_connect)
        mp.setattr(socket.socket, "connect_ex", guarded_connect_ex)
        mp.setattr(socket, "getaddrinfo", guarded_getaddrinfo)
        yield
