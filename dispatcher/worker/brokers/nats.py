"""NATS JetStream: a publish is done when the stream acknowledged it.

`Nats-Msg-Id` is the delivery's webhook-id: within the stream's duplicate
window the stream keeps one copy of a re-sent message (the PubAck says
`duplicate`), so a retry after a lost acknowledgement does not store the
event twice. No stream listening on the subject: `unroutable`, permanent.
The client's own reconnecting is off: a lost connection is the pool's to
reopen (brokers/__init__.py), as for the other brokers.
"""

from __future__ import annotations

import asyncio
import ssl
from typing import Any

import nats
import nats.errors
import orjson

# nats-py's own header-name check and line-break translation, so a header
# goes out as its js.publish would write it.
from nats.aio.client import _HEADER_KEY_RE, _HEADER_VALUE_NEWLINES, NO_RESPONDERS_STATUS, Client
from nats.js.api import Header

from dispatcher.core.destinations import BrokerTarget
from dispatcher.worker.brokers.link import BrokerFailure, BrokerMessage, lost

CONNECT_TIMEOUT_S = 10


_AUTH_REFUSED = "authorization violation"


async def _quiet(*_: object) -> None:
    """The client's callbacks: its errors reach us as exceptions."""


def _head(name: str) -> str:
    """`Name: `, once NATS can carry the name."""
    key = name.strip()
    if not _HEADER_KEY_RE.fullmatch(key):
        raise BrokerFailure(f"nack: {key!r} is not a NATS header name", permanent=True)
    return f"{key}: "


class NatsLink:
    """JetStream publishes written as nats-py's own request would write
    them (HPUB with a reply subject on the client's response inbox, each
    answered by a PubAck there), without its per-request cost: nats-py's
    `js.publish` builds the header block key by key through a regex, makes
    a NUID token and a `wait_for` timer, and kicks its flusher, about a
    third of a worker's CPU per delivery at thousands a second (BENCHMARKS,
    issue 33). Here a header name is checked and encoded once, the token is
    a counter, the publish's deadline is the sender's, and the commands of
    one turn of the loop reach the flusher together. Pinned to nats-py
    2.16's internals (`_resp_map`, `_pending`, `_flush_queue`): its own
    broker tests run against a real server."""

    def __init__(self, client: Client) -> None:
        self._client = client
        self._sent = 0
        self._kicked = False
        self._names: dict[str, str] = {}

    async def publish(self, target: BrokerTarget, msg: BrokerMessage) -> None:
        client = self._client
        if client.is_closed or not client.is_connected or client.is_draining_pubs:
            raise lost()
        if not client._resp_sub_prefix:
            await client._init_request_sub()
        prefix = client._resp_sub_prefix
        assert prefix is not None
        self._sent += 1
        token = f"{self._sent:x}"  # nats-py's own tokens are NUIDs: never these
        header = self._header(msg.headers, msg.msg_id)
        body = msg.body
        size = len(header) + len(body)
        if size > client._max_payload:
            raise BrokerFailure("nack: larger than the server's max_payload", permanent=True)
        loop = asyncio.get_running_loop()
        answered: asyncio.Future[Any] = loop.create_future()
        client._resp_map[token] = answered
        reply = prefix.decode() + token
        command = b"".join((
            f"HPUB {target.subject} {reply} {len(header)} {size}\r\n".encode(), header, body,
            b"\r\n",
        ))  # fmt: skip
        client._pending.append(command)
        client._pending_data_size += len(command)
        if not self._kicked:
            self._kicked = True
            loop.call_soon(self._kick)
        try:
            answer = await answered
        finally:
            client._resp_map.pop(token, None)
        if answer.headers and answer.headers.get(Header.STATUS) == NO_RESPONDERS_STATUS:
            raise BrokerFailure("unroutable: no stream takes the subject", permanent=True)
        data = answer.data
        if b'"error"' in data:
            error = orjson.loads(data).get("error") or {}
            code = error.get("err_code") or error.get("code")
            raise BrokerFailure(f"nack: the stream refused it (code {code})", permanent=False)

    def _kick(self) -> None:
        """What this turn of the loop queued, to the client's flusher."""
        self._kicked = False
        queue = self._client._flush_queue
        if queue is not None and queue.empty() and self._client.is_connected:
            queue.put_nowait(asyncio.get_running_loop().create_future())

    def _header(self, headers: dict[str, str], msg_id: str) -> bytes:
        """The NATS header block, as nats-py writes it (names checked,
        values stripped, line breaks as spaces), with `Nats-Msg-Id`."""
        names = self._names
        items = (*headers.items(), ("Nats-Msg-Id", msg_id))
        lines = []
        for name, value in items:
            head = names.get(name)
            if head is None:
                head = names[name] = _head(name)
            lines.append(f"{head}{value.strip()}\r\n")
        text = "".join(lines)
        if text.count("\n") != len(lines) or text.count("\r") != len(lines):
            # A value with a line break of its own (rare): as nats-py does.
            text = "".join(
                f"{names[k]}{v.strip().translate(_HEADER_VALUE_NEWLINES)}\r\n" for k, v in items
            )
        return b"NATS/1.0\r\n" + text.encode() + b"\r\n"

    async def close(self) -> None:
        await self._client.close()


async def connect(target: BrokerTarget, host: str, context: ssl.SSLContext | None) -> NatsLink:
    shown = f"[{host}]" if ":" in host else host
    # user:password, or a token: `:TOKEN@` (destinations.py), or `TOKEN@`
    # as NATS writes it, in an endpoint stored before that was refused.
    paired = bool(target.username) and target.password is not None
    client = Client()
    try:
        await client.connect(
            servers=[f"{'tls' if context else 'nats'}://{shown}:{target.port}"],
            user=target.username if paired else None,
            password=target.password if paired else None,
            token=None if paired else (target.password or target.username or None),
            tls=context,
            tls_hostname=target.host if context else None,
            allow_reconnect=False,
            connect_timeout=CONNECT_TIMEOUT_S,
            error_cb=_quiet,
            disconnected_cb=_quiet,
            closed_cb=_quiet,
            name="dispatcher",
        )
    except BaseException as exc:
        # A refused connect leaves the client's socket open (nats-py 2.x).
        await client.close()
        raise _failure(exc) from None
    return NatsLink(client)


def _failure(exc: BaseException) -> BaseException:
    """What a failed connect means in our words (brokers/link.py)."""
    if isinstance(exc, nats.errors.AuthorizationError) or (
        # A wrong user, password or token comes as the server's -ERR line
        # in a plain nats.errors.Error, not as AuthorizationError.
        type(exc) is nats.errors.Error and _AUTH_REFUSED in str(exc).lower()
    ):
        return BrokerFailure("auth: the server refused the credentials", permanent=True)
    if isinstance(exc, nats.errors.NoServersError):
        return ConnectionRefusedError("no NATS server answered")
    return exc
