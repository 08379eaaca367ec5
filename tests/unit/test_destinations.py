"""core/destinations.py: broker URLs read, refused, sealed and masked."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dispatcher.core.destinations import (
    PASSWORD_MASK,
    broker_address,
    broker_refusal,
    kept_password,
    kind_of,
    masked_url,
    open_url,
    parse_broker,
    seal_url,
    validate_destination,
)
from dispatcher.core.errors import BadInput
from dispatcher.core.secretbox import SecretBox
from dispatcher.core.ssrf import TargetPolicy

BOX = SecretBox("unit-test-key")


@pytest.mark.parametrize(
    ("url", "kind"),
    [
        ("https://example.com/h", "http"),
        ("amqp://mq/?exchange=x", "amqp"),
        ("AMQPS://mq/?exchange=x", "amqp"),
        ("nats://n:4222/a.b", "nats"),
        ("tls://n/a", "nats"),
        ("redis://r/0?stream=s", "redis"),
        ("rediss://r/0?stream=s", "redis"),
        ("poll:", "poll"),
        ("ftp://x/", "http"),  # not a broker: the HTTP checks refuse it
    ],
)
def test_the_scheme_names_the_kind(url: str, kind: str) -> None:
    assert kind_of(url) == kind


def test_each_broker_url_is_read_with_its_defaults() -> None:
    a = parse_broker("amqp://u:p@mq.internal/orders?exchange=events&routing_key=paid")
    assert (a.host, a.port, a.vhost, a.exchange, a.routing_key) == (
        "mq.internal", 5672, "orders", "events", "paid")  # fmt: skip
    assert (a.username, a.password, a.tls) == ("u", "p", False)
    assert parse_broker("amqps://mq/?exchange=e").port == 5671
    assert parse_broker("amqp://mq/?routing_key=q").vhost == "/"
    n = parse_broker("tls://n.internal/orders.paid")
    assert (n.kind, n.tls, n.port, n.subject) == ("nats", True, 4222, "orders.paid")
    r = parse_broker("redis://:pw@r:6380/3?stream=events&maxlen=1000")
    assert (r.port, r.db, r.stream, r.maxlen, r.password) == (6380, 3, "events", 1000, "pw")


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("amqp://mq/", "names where to publish"),
        ("amqp://mq/?exchange=a b", "whitespace"),
        ("amqp://mq/?exchange=x&colour=red", "no query parameter colour"),
        ("amqp://mq/?exchange=x&exchange=y", "given twice"),
        ("nats://n:4222/", "one subject"),
        ("nats://n:4222/orders.*", "one subject"),
        ("nats://n:4222/a?x=1", "no query parameter"),
        ("redis://r/0", "names its stream"),
        ("redis://r/zero?stream=s", "database number"),
        ("redis://r/0?stream=s&maxlen=0", "maxlen"),
        ("redis://r/0?stream=s&maxlen=-3", "maxlen"),
        ("redis:///0?stream=s", "host"),
        ("amqp://mq:0/?exchange=x", "port"),
        ("amqp://mq:99999/?exchange=x", "not valid"),
        ("nats://n/{event_type}", "macros"),
        ("amqp://mq/?exchange=x#frag", "fragment"),
    ],
)
def test_a_broker_url_that_cannot_be_used_says_why(url: str, says: str) -> None:
    with pytest.raises(BadInput, match=says):
        validate_destination(url)


def test_a_polling_endpoint_is_poll_and_nothing_more() -> None:
    assert validate_destination("poll:") == "poll:"
    for bad in ("poll:x", "poll://", "POLL:/a"):
        with pytest.raises(BadInput, match="poll:"):
            validate_destination(bad)


def test_http_urls_keep_their_own_checks() -> None:
    assert validate_destination("https://example.com/{id}") == "https://example.com/{id}"
    with pytest.raises(BadInput, match="scheme"):
        validate_destination("ftp://example.com/")


_password = st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), min_size=1,
                    max_size=40).filter(lambda p: p != PASSWORD_MASK)  # fmt: skip


@given(_password)
def test_a_password_round_trips_sealed_and_is_never_shown(password: str) -> None:
    from urllib.parse import quote

    url = f"amqp://app:{quote(password, safe='')}@mq:5672/v?exchange=e&routing_key=k"
    stored = seal_url(BOX, url)
    assert stored.startswith("amqp://app:enc%3Av1%3A")  # only the sealed form is stored
    assert open_url(BOX, stored) == url
    assert seal_url(BOX, stored) == stored  # sealed once
    shown = masked_url(stored)
    assert shown == f"amqp://app:{PASSWORD_MASK}@mq:5672/v?exchange=e&routing_key=k"
    assert kept_password(shown, stored) == stored
    assert parse_broker(open_url(BOX, stored)).password == password


def test_without_a_key_the_password_is_kept_plain_and_still_masked() -> None:
    url = "redis://:pw@r:6379/0?stream=s"
    assert seal_url(None, url) == url
    assert masked_url(url) == f"redis://:{PASSWORD_MASK}@r:6379/0?stream=s"


def test_the_mask_keeps_the_password_only_for_the_same_url() -> None:
    stored = seal_url(BOX, "amqp://u:p@mq/?exchange=e")
    with pytest.raises(BadInput, match="same url"):
        kept_password(f"amqp://u:{PASSWORD_MASK}@other/?exchange=e", stored)
    assert kept_password("amqp://u:new@mq/?exchange=e", stored) == "amqp://u:new@mq/?exchange=e"


def test_allowed_brokers_are_named_by_scheme_host_and_port() -> None:
    assert broker_address("AMQP://MQ.internal") == "amqp://mq.internal:5672"
    assert broker_address("nats://[::1]:4223/") == "nats://[::1]:4223"
    for bad in ("mq:5672", "http://x:1", "amqp://mq/vhost", "amqp://"):
        with pytest.raises(BadInput):
            broker_address(bad)


def test_tenants_use_only_allowed_brokers_and_everyone_the_ssrf_guard() -> None:
    allowed = TargetPolicy(brokers_allowed=frozenset({"amqp://10.0.0.5:5672"}))
    listed = parse_broker("amqp://10.0.0.5/?exchange=e")
    other = parse_broker("amqp://mq.example.com/?exchange=e")
    private = parse_broker("amqp://127.0.0.1/?exchange=e")
    assert broker_refusal(listed, allowed, tenant=True) is None  # listed: trusted, private or not
    assert "DISPATCHER_BROKERS_ALLOWED" in (broker_refusal(other, allowed, tenant=True) or "")
    assert broker_refusal(other, allowed, tenant=False) is None
    assert "DISPATCHER_ALLOW_PRIVATE_TARGETS" in (
        broker_refusal(private, allowed, tenant=False) or ""
    )
    open_policy = TargetPolicy(allow_private=True)
    assert broker_refusal(private, open_policy, tenant=False) is None
