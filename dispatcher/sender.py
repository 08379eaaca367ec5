"""The HTTP adapter: signs, POSTs, classifies. The only module using aiohttp's client.

It owns one ClientSession (one connector, keep-alive pool) for the process.
It never logs or stores payloads or response bodies: a response body is read
up to a small cap only so the connection can go back to the pool.
"""

from __future__ import annotations

import socket
import ssl
import time
from pathlib import Path

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver
from multidict import CIMultiDict
from yarl import URL

from . import __version__
from .errors import OperationalError, TargetRefused
from .models import AttemptResult, Endpoint, Verdict
from .retry import classify_status, parse_retry_after
from .signing import Signer
from .ssrf import check_address, target_refusal

USER_AGENT = f"dispatcher/{__version__}"
MAX_ERROR_LEN = 300


class GuardedResolver(AbstractResolver):
    """Resolves, then keeps only the addresses the SSRF guard allows.

    aiohttp connects to exactly what this returns, so there is no second
    lookup for a rebinding name to change its answer in.
    """

    def __init__(
        self,
        *,
        allow_private: bool,
        allowed_networks: tuple[str, ...] = (),
        inner: AbstractResolver | None = None,
    ) -> None:
        self._allow_private = allow_private
        self._allowed_networks = allowed_networks
        self._inner = inner if inner is not None else DefaultResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        answers = await self._inner.resolve(host, port, family)
        kept = []
        refused: TargetRefused | None = None
        for a in answers:
            try:
                check_address(
                    host,
                    a["host"],
                    allow_private=self._allow_private,
                    allowed_networks=self._allowed_networks,
                )
            except TargetRefused as exc:
                refused = exc
                continue
            kept.append(a)
        if not kept:
            raise refused or TargetRefused(f"{host} did not resolve")
        return kept

    async def close(self) -> None:
        await self._inner.close()


class EndpointWire:
    """Per-endpoint wire settings, built once per endpoint version."""

    __slots__ = ("headers", "signer", "target", "timeout", "timeout_ms", "url", "url_refusal")

    def __init__(
        self,
        url: str,
        secrets: tuple[str, ...],
        timeout_ms: int,
        *,
        allow_private: bool,
        allowed_networks: tuple[str, ...] = (),
        headers: tuple[tuple[str, str], ...] = (),
    ):
        self.url = url
        self.target = URL(url)  # parsed once, not per request
        # The fixed part of every request's headers, copied per request (a C
        # copy) instead of rebuilt from a dict.
        self.headers: CIMultiDict[str] = CIMultiDict(headers)
        self.headers["content-type"] = "application/json"
        self.headers["user-agent"] = USER_AGENT
        self.signer = Signer(secrets)
        self.timeout_ms = timeout_ms
        self.timeout = aiohttp.ClientTimeout(total=timeout_ms / 1000)
        # Decided once per endpoint version, not per request: aiohttp skips
        # the resolver for IP literals, and refuses non-canonical IPv4 forms
        # itself only as a retryable error; both are a permanent refusal here.
        self.url_refusal = target_refusal(
            self.target.raw_host or "",
            allow_private=allow_private,
            allowed_networks=allowed_networks,
        )


class Sender:
    def __init__(
        self,
        *,
        allow_private: bool,
        allowed_networks: tuple[str, ...] = (),
        body_cap: int = 4096,
        resolver: AbstractResolver | None = None,
        ca_file: Path | None = None,
    ) -> None:
        self.allow_private = allow_private
        self.allowed_networks = allowed_networks
        self._body_cap = body_cap
        self._resolver = resolver
        self._ca_file = ca_file
        self._session: aiohttp.ClientSession | None = None

    def _tls(self) -> ssl.SSLContext | bool:
        """The system store, plus DISPATCHER_CA_FILE's certificates when set.
        Certificates and host names are always verified."""
        if self._ca_file is None:
            return True  # aiohttp's default verifying context
        ctx = ssl.create_default_context()
        try:
            ctx.load_verify_locations(cafile=str(self._ca_file))
        except (OSError, ssl.SSLError) as exc:
            raise OperationalError(
                f"DISPATCHER_CA_FILE {self._ca_file}: cannot load CA certificates: {exc}"
            ) from None
        return ctx

    async def start(self) -> None:
        connector = aiohttp.TCPConnector(
            ssl=self._tls(),
            # Concurrency is bounded by the engine (global cap, per-endpoint
            # gates); the connector only pools, keeping sockets per host alive.
            limit=0,
            limit_per_host=0,
            keepalive_timeout=30,
            resolver=GuardedResolver(
                allow_private=self.allow_private,
                allowed_networks=self.allowed_networks,
                inner=self._resolver,
            ),
            ttl_dns_cache=60,
            enable_cleanup_closed=False,
        )
        # No skip_auto_headers: it takes aiohttp off its per-request fast path.
        # Response bodies are never decoded, so Accept-Encoding costs nothing.
        self._session = aiohttp.ClientSession(
            connector=connector,
            auto_decompress=False,
            cookie_jar=aiohttp.DummyCookieJar(),
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def wire(self, endpoint: Endpoint) -> EndpointWire:
        return EndpointWire(
            endpoint.url,
            endpoint.secrets,
            endpoint.timeout_ms,
            allow_private=self.allow_private,
            allowed_networks=self.allowed_networks,
            headers=endpoint.headers,
        )

    async def post(self, wire: EndpointWire, event_id: str, body: bytes) -> AttemptResult:
        assert self._session is not None, "Sender.start() first"
        if wire.url_refusal is not None:
            return AttemptResult(
                verdict=Verdict.PERMANENT,
                status_code=None,
                response_ms=0,
                error=f"refused target: {wire.url_refusal}"[:MAX_ERROR_LEN],
            )
        now = time.time()
        ts = int(now)
        headers = wire.headers.copy()
        headers["webhook-id"] = event_id
        headers["webhook-timestamp"] = str(ts)
        headers["webhook-signature"] = wire.signer.signature(event_id, ts, body)
        t0 = time.perf_counter()
        try:
            async with self._session.post(
                wire.target,
                data=body,
                headers=headers,
                allow_redirects=False,
                timeout=wire.timeout,
            ) as resp:
                status = resp.status
                ms = int((time.perf_counter() - t0) * 1000)
                retry_after = resp.headers.get("retry-after")
                try:
                    await self._drain(resp)
                except (aiohttp.ClientError, OSError, TimeoutError):
                    # The status line arrived in time: that is the answer.
                    # A body cut short after a 2xx is still a delivery
                    # (retrying it would send a duplicate by design).
                    pass
        except TargetRefused as exc:
            return self._failed(Verdict.PERMANENT, t0, f"refused target: {exc}")
        except TimeoutError:
            return self._failed(
                Verdict.RETRYABLE, t0, f"timeout after {wire.timeout_ms} ms", timed_out=True
            )
        except aiohttp.ClientConnectorError as exc:
            return self._failed(Verdict.RETRYABLE, t0, f"connection error: {exc.os_error}")
        except (aiohttp.ClientError, OSError) as exc:
            return self._failed(Verdict.RETRYABLE, t0, f"{type(exc).__name__}: {exc}")
        verdict = classify_status(status)
        if verdict is Verdict.SUCCESS:
            return AttemptResult(verdict=verdict, status_code=status, response_ms=ms)
        wait = parse_retry_after(retry_after, now) if status in (429, 503) else None
        return AttemptResult(
            verdict=verdict,
            status_code=status,
            response_ms=ms,
            error=f"HTTP {status}",
            retry_after_s=wait,
            gone=status == 410,
            overloaded=status in (429, 503),
        )

    async def _drain(self, resp: aiohttp.ClientResponse) -> None:
        # Up to the cap, so a small body leaves the connection reusable; a
        # bigger one is abandoned and the connection closed on release.
        left = self._body_cap
        while left > 0:
            chunk = await resp.content.read(left)
            if not chunk:
                return
            left -= len(chunk)

    @staticmethod
    def _failed(
        verdict: Verdict, t0: float, error: str, *, timed_out: bool = False
    ) -> AttemptResult:
        ms = int((time.perf_counter() - t0) * 1000)
        return AttemptResult(
            verdict=verdict,
            status_code=None,
            response_ms=ms,
            error=error[:MAX_ERROR_LEN],
            timed_out=timed_out,
        )
