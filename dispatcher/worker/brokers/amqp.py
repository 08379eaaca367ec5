"""RabbitMQ: publisher confirms, persistent messages, `mandatory`.

A publish is done when the broker confirmed it (Basic.Ack): for a durable
queue that is after the message was written to disk. A message no queue
takes comes back (Basic.Return): `unroutable`, permanent. A Basic.Nack (the
broker could not take it): `nack`, retried. One connection per link, one
channel per exchange on it: an exchange that does not exist closes only
its own channel (`unroutable`, permanent), not the others'.
"""

from __future__ import annotations

import ssl
from datetime import UTC, datetime

import aio_pika
import aiormq
import aiormq.abc
from aio_pika.abc import AbstractChannel, AbstractConnection

from dispatcher.core.destinations import BrokerTarget
from dispatcher.worker.brokers.link import CONNECTION_LOST, BrokerFailure, BrokerMessage, lost

CONNECT_TIMEOUT_S = 10.0
PERSISTENT = int(aio_pika.DeliveryMode.PERSISTENT)


class AmqpLink:
    """Publishes through aiormq's channel under aio-pika's: aio-pika's
    Message and Exchange.publish add nothing a confirmed publish needs and
    cost about 7 % of a worker's CPU per delivery (BENCHMARKS, issue 33).
    The properties are what aio-pika's Message would have set."""

    def __init__(self, connection: AbstractConnection) -> None:
        self._connection = connection
        self._exchanges: dict[str, tuple[AbstractChannel, aiormq.abc.AbstractChannel]] = {}

    async def _channel(self, name: str) -> aiormq.abc.AbstractChannel:
        """The confirming channel publishing to exchange `name`, checked to
        exist (an absent one closes the channel: ChannelNotFoundEntity)."""
        held = self._exchanges.get(name)
        if held is not None and not held[0].is_closed:
            return held[1]
        channel = await self._connection.channel(publisher_confirms=True, on_return_raises=True)
        if name:
            await channel.get_exchange(name, ensure=False)
        underlay = await channel.get_underlay_channel()
        self._exchanges[name] = (channel, underlay)
        return underlay

    async def publish(self, target: BrokerTarget, msg: BrokerMessage) -> None:
        if self._connection.is_closed:
            raise lost()
        properties = aiormq.spec.Basic.Properties(
            content_type=msg.headers.get("content-type"),
            delivery_mode=PERSISTENT,
            headers=dict(msg.headers),
            message_id=msg.msg_id,
            message_type=msg.event_type or None,
            priority=0,
            timestamp=datetime.fromtimestamp(msg.timestamp, tz=UTC),
        )
        try:
            channel = await self._channel(target.exchange)
            await channel.basic_publish(msg.body, exchange=target.exchange,
                                        routing_key=target.routing_key, properties=properties,
                                        mandatory=True)  # fmt: skip
        except aiormq.exceptions.PublishError:
            raise BrokerFailure("unroutable: no queue is bound for it", permanent=True) from None
        except aiormq.exceptions.DeliveryError:
            raise BrokerFailure("nack: the broker did not take it", permanent=False) from None
        except aiormq.exceptions.ChannelNotFoundEntity:
            self._exchanges.pop(target.exchange, None)
            raise BrokerFailure("unroutable: no such exchange", permanent=True) from None
        except aiormq.exceptions.ChannelAccessRefused:
            self._exchanges.pop(target.exchange, None)
            raise BrokerFailure("auth: not allowed to publish there", permanent=True) from None
        except (aiormq.exceptions.AMQPChannelError,
                aiormq.exceptions.ChannelInvalidStateError) as exc:  # fmt: skip
            self._exchanges.pop(target.exchange, None)
            raise BrokerFailure(f"connection reset: channel closed ({type(exc).__name__})",
                                permanent=False) from None  # fmt: skip
        except aiormq.exceptions.AMQPConnectionError as exc:
            raise BrokerFailure(_connection_word(exc), permanent=False, drop=True) from None

    async def close(self) -> None:
        await self._connection.close()


def _connection_word(exc: BaseException) -> str:
    if isinstance(exc, aiormq.exceptions.ConnectionResourceError):
        return "nack: the broker refused the connection's work (resource alarm)"
    return CONNECTION_LOST


async def connect(target: BrokerTarget, host: str, context: ssl.SSLContext | None) -> AmqpLink:
    try:
        connection = await aio_pika.connect(
            host=host,
            port=target.port,
            login=target.username or "guest",
            password=target.password or "guest",
            virtualhost=target.vhost,
            ssl=context is not None,
            ssl_context=context,
            timeout=CONNECT_TIMEOUT_S,
            client_properties={"connection_name": "dispatcher"},
        )
    except (aiormq.exceptions.ProbableAuthenticationError,
            aiormq.exceptions.AuthenticationError):  # fmt: skip
        raise BrokerFailure("auth: the broker refused the credentials", permanent=True) from None
    except aiormq.exceptions.ConnectionNotAllowed:
        raise BrokerFailure("auth: no access to the vhost", permanent=True) from None
    except aiormq.exceptions.AMQPConnectionError as exc:
        if isinstance(exc.__cause__, OSError):
            raise exc.__cause__ from None
        raise BrokerFailure("bad response: the broker's handshake", permanent=False) from None
    return AmqpLink(connection)
