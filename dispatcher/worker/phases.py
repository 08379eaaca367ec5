"""Where an attempt's time went while it opened a connection: DNS, the TCP
connect and the TLS handshake (SPEC "Traces and attempt details").

The sender sets a Phases for the attempt in a context variable; the
resolver (sender.GuardedResolver) and TimedConnector fill it in, only when
the attempt opens a connection (a reused one costs nothing here). A context
variable, not aiohttp's trace hooks, which would cost every request a round
of empty signals, and which have no hook between the connect and the
handshake at all.
"""

from __future__ import annotations

import asyncio
import contextvars
import sys
import time
from dataclasses import dataclass
from typing import Any

import aiohappyeyeballs
import aiohttp
from aiohttp.client_exceptions import (
    ClientConnectorCertificateError,
    ClientConnectorError,
    ClientConnectorSSLError,
    cert_errors,
    ssl_errors,
)
from aiohttp.helpers import ceil_timeout


@dataclass(slots=True)
class Phases:
    """Seconds each phase took; None when this attempt had no such phase."""

    dns: float | None = None
    opened: float | None = None  # resolving, connecting and the handshake
    tls: float | None = None

    def connect(self) -> float | None:
        """The TCP connect alone (the opening less its DNS and TLS)."""
        if self.opened is None:
            return None
        return max(self.opened - (self.dns or 0.0) - (self.tls or 0.0), 0.0)


CURRENT: contextvars.ContextVar[Phases | None] = contextvars.ContextVar(
    "dispatcher_attempt_phases", default=None
)


class TimedConnector(aiohttp.TCPConnector):
    """aiohttp's connector, timing the connections it opens for an attempt."""

    async def _create_connection(self, req: Any, traces: Any, timeout: Any) -> Any:
        phases = CURRENT.get()
        if phases is None:
            return await super()._create_connection(req, traces, timeout)
        t0 = time.perf_counter()
        proto = await super()._create_connection(req, traces, timeout)
        phases.opened = time.perf_counter() - t0
        return proto

    async def _wrap_create_connection(
        self,
        *args: Any,
        addr_infos: Any,
        req: Any,
        timeout: Any,
        client_error: type[Exception] = ClientConnectorError,
        **kwargs: Any,
    ) -> tuple[asyncio.Transport, Any]:
        phases = CURRENT.get()
        if phases is None or not kwargs.get("ssl"):
            return await super()._wrap_create_connection(
                *args, addr_infos=addr_infos, req=req, timeout=timeout,
                client_error=client_error, **kwargs,
            )  # fmt: skip
        # aiohttp's own steps (3.14, pinned in pyproject.toml), with a clock
        # read between the socket's connect and the handshake the loop does
        # on it: aiohttp does both in this one call.
        try:
            async with ceil_timeout(timeout.sock_connect, ceil_threshold=timeout.ceil_threshold):
                sock = await aiohappyeyeballs.start_connection(
                    addr_infos=addr_infos,
                    local_addr_infos=self._local_addr_infos,
                    happy_eyeballs_delay=self._happy_eyeballs_delay,
                    interleave=self._interleave,
                    loop=self._loop,
                    socket_factory=self._socket_factory,
                )
                if self._ssl_shutdown_timeout and sys.version_info >= (3, 11):
                    kwargs["ssl_shutdown_timeout"] = self._ssl_shutdown_timeout
                t_tls = time.perf_counter()
                try:
                    return await self._loop.create_connection(*args, **kwargs, sock=sock)
                finally:
                    phases.tls = time.perf_counter() - t_tls
        except cert_errors as exc:
            raise ClientConnectorCertificateError(req.connection_key, exc) from exc
        except ssl_errors as exc:
            raise ClientConnectorSSLError(req.connection_key, exc) from exc
        except OSError as exc:
            if exc.errno is None and isinstance(exc, asyncio.TimeoutError):
                raise
            raise client_error(req.connection_key, exc) from exc
