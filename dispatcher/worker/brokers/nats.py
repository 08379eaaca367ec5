"""NATS JetStream: a publish is done when the stream acknowledged it.

`Nats-Msg-Id` is the delivery's webhook-id: within the stream's duplicate
window the stream keeps one copy of a re-sent message (the PubAck says
`duplicate`), so a retry after a lost acknowledgement does not store the
event twice. No stream listening on the subject: `unroutable`, permanent.
The client's own reconnecting is off: a lost connection is the pool's to
reopen (brokers/__init__.py), as for the other brokers.
"""

from __future__ import annotations

import ssl

import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client

from dispatcher.core.destinations import BrokerTarget
from dispatcher.worker.brokers.link import BrokerFailure, BrokerMessage, lost

CONNECT_TIMEOUT_S = 10
# The endpoint's timeout (the sender's deadline) cuts a publish short; the
# client's own request timeout only has to be longer than any of them.
REQUEST_TIMEOUT_S = 300.0


async def _quiet(*_: object) -> None:
    """The client's callbacks: its errors reach us as exceptions."""


class NatsLink:
    def __init__(self, client: Client) -> None:
        self._client = client
        self._js = client.jetstream()

    async def publish(self, target: BrokerTarget, msg: BrokerMessage) -> None:
        if self._client.is_closed:
            raise lost()
        headers = {**msg.headers, "Nats-Msg-Id": msg.msg_id}
        try:
            await self._js.publish(target.subject, msg.body, timeout=REQUEST_TIMEOUT_S,
                                   headers=headers)  # fmt: skip
        except nats.js.errors.NoStreamResponseError:
            raise BrokerFailure("unroutable: no stream takes the subject", permanent=True) from None
        except nats.js.errors.APIError as exc:
            code = getattr(exc, "err_code", None) or getattr(exc, "code", None)
            raise BrokerFailure(f"nack: the stream refused it (code {code})",
                                permanent=False) from None  # fmt: skip
        except nats.errors.MaxPayloadError:
            raise BrokerFailure("nack: larger than the server's max_payload",
                                permanent=True) from None  # fmt: skip
        except (nats.errors.ConnectionClosedError, nats.errors.StaleConnectionError,
                nats.errors.OutboundBufferLimitError, nats.errors.ConnectionReconnectingError,
                nats.errors.ConnectionDrainingError):  # fmt: skip
            raise lost() from None

    async def close(self) -> None:
        await self._client.close()


async def connect(target: BrokerTarget, host: str, context: ssl.SSLContext | None) -> NatsLink:
    shown = f"[{host}]" if ":" in host else host
    try:
        client = await nats.connect(
            servers=[f"{'tls' if context else 'nats'}://{shown}:{target.port}"],
            user=target.username,
            password=target.password,
            tls=context,
            tls_hostname=target.host if context else None,
            allow_reconnect=False,
            connect_timeout=CONNECT_TIMEOUT_S,
            error_cb=_quiet,
            disconnected_cb=_quiet,
            closed_cb=_quiet,
            name="dispatcher",
        )
    except nats.errors.AuthorizationError:
        raise BrokerFailure("auth: the server refused the credentials", permanent=True) from None
    except nats.errors.NoServersError:
        raise ConnectionRefusedError("no NATS server answered") from None
    return NatsLink(client)
