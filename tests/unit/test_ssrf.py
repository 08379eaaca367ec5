"""Unit tests for dispatcher.core.ssrf, the SSRF guard (pure, on resolved addresses).

SPEC: with DISPATCHER_ALLOW_PRIVATE_TARGETS off, loopback / private /
link-local destinations are refused; the guard must see through every
IPv6 form that embeds an IPv4 address.
"""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from dispatcher.core.errors import BadInput, DispatcherError, TargetRefused
from dispatcher.core.ssrf import (
    TargetPolicy,
    address_allowed,
    check_address,
    check_target,
    literal_address,
    target_refusal,
    validate_url,
)
from dispatcher.worker.wire import EndpointWire

PROPS = settings(max_examples=200, deadline=None, database=None)

REFUSED = [
    # IPv4 loopback, the whole /8
    "127.0.0.1",
    "127.0.0.53",
    "127.255.255.254",
    # RFC 1918
    "10.0.0.1",
    "10.255.255.255",
    "172.16.0.1",
    "172.20.10.5",
    "172.31.255.255",
    "192.168.0.1",
    "192.168.255.255",
    # CGNAT (RFC 6598)
    "100.64.0.1",
    "100.127.255.254",
    # link-local, cloud metadata
    "169.254.169.254",
    "169.254.0.1",
    "169.254.170.2",  # ECS task metadata
    # unspecified / "this network"
    "0.0.0.0",
    "0.1.2.3",
    # multicast and broadcast
    "224.0.0.1",
    "239.255.255.250",
    "255.255.255.255",
    # reserved, documentation, benchmarking, protocol assignments
    "240.0.0.1",
    "192.0.0.1",
    "192.0.2.1",
    "198.18.0.1",
    "198.51.100.7",
    "203.0.113.9",
    # IPv6 loopback / unspecified
    "::1",
    "::",
    # link-local, unique-local
    "fe80::",
    "fe80::1",
    "fe80::1ff:fe23:4567:890a",
    "fc00::",
    "fc00::1",
    "fd00::1",
    "fd00:ec2::254",  # AWS metadata over IPv6
    # multicast
    "ff02::1",
    "ff05::2",
    "ff0e::1",
    # documentation
    "2001:db8::1",
    # IPv4-mapped
    "::ffff:127.0.0.1",
    "::ffff:10.0.0.1",
    "::ffff:169.254.169.254",
    "::ffff:192.168.1.1",
    "::ffff:100.64.0.1",
    "::ffff:0.0.0.0",
    # 6to4 embedding a private address
    "2002:7f00:1::",
    "2002:7f00:0001::1",
    "2002:a00:1::",
    "2002:a9fe:a9fe::",
    "2002:c0a8:101::1",
    # NAT64 (well-known prefix) embedding a private address
    "64:ff9b::7f00:1",
    "64:ff9b::a00:1",
    "64:ff9b::a9fe:a9fe",
    "64:ff9b::c0a8:101",
    "64:ff9b::6440:1",
    # local-use NAT64 prefix (RFC 8215): refused outright
    "64:ff9b:1::1",
    "64:ff9b:1::808:808",
    # Teredo (2001::/32) is not public unicast
    "2001::1",
    "2001:0:4136:e378:8000:63bf:3fff:fdd2",
    # IPv4-compatible (deprecated ::a.b.c.d) forms of private addresses
    "::127.0.0.1",
    "::7f00:1",
    "::10.0.0.1",
    "::169.254.169.254",
    "::192.168.0.1",
    # IPv4-translated (SIIT, ::ffff:0:a.b.c.d) forms of private addresses
    "::ffff:0:127.0.0.1",
    "::ffff:0:7f00:1",
    "::ffff:0:a9fe:a9fe",
]

ALLOWED = [
    "8.8.8.8",
    "8.8.4.4",
    "1.1.1.1",
    "9.9.9.9",
    "93.184.216.34",
    "151.101.1.69",
    "172.15.255.255",  # just below 172.16/12
    "172.32.0.1",  # just above 172.16/12
    "100.63.255.255",  # just below 100.64/10
    "100.128.0.1",  # just above 100.64/10
    "11.0.0.1",
    "126.255.255.255",
    "128.0.0.1",
    "169.253.255.255",
    "169.255.0.1",
    "192.167.255.255",
    "192.169.0.1",
    "223.255.255.254",
    "2606:4700:4700::1111",
    "2001:4860:4860::8888",
    "2a00:1450:4001:81c::200e",
    "2620:fe::fe",
    "::ffff:8.8.8.8",  # IPv4-mapped public
    "64:ff9b::808:808",  # NAT64 of a public address
    "64:ff9b::101:101",
]


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    return ipaddress.ip_address(text)


@pytest.mark.parametrize("address", REFUSED)
def test_address_refused(address: str) -> None:
    assert address_allowed(_ip(address)) is False


@pytest.mark.parametrize("address", ALLOWED)
def test_address_allowed(address: str) -> None:
    assert address_allowed(_ip(address)) is True


@pytest.mark.parametrize("address", REFUSED)
def test_check_address_raises_for_refused(address: str) -> None:
    with pytest.raises(TargetRefused) as excinfo:
        check_address("hooks.example.com", address, allow_private=False)
    assert isinstance(excinfo.value, DispatcherError)
    message = str(excinfo.value)
    assert "hooks.example.com" in message
    assert "\n" not in message


@pytest.mark.parametrize("address", ALLOWED)
def test_check_address_passes_public(address: str) -> None:
    assert check_address("hooks.example.com", address, allow_private=False) is None


@pytest.mark.parametrize("address", REFUSED + ALLOWED)
def test_allow_private_allows_everything(address: str) -> None:
    assert check_address("hooks.example.com", address, allow_private=True) is None


@pytest.mark.parametrize(
    "address",
    ["fe80::1%eth0", "fe80::1%1", "ff02::1%lo", "::1%lo"],
)
def test_check_address_with_zone_id_refused(address: str) -> None:
    with pytest.raises(TargetRefused):
        check_address("h", address, allow_private=False)


def test_check_address_public_with_zone_id() -> None:
    check_address("h", "2606:4700:4700::1111%eth0", allow_private=False)


@pytest.mark.parametrize(
    "address",
    [
        "",
        "localhost",
        "example.com",
        "0x7f.0.0.1",  # inet_aton shorthand forms are not addresses here
        "0177.0.0.1",
        "2130706433",
        "127.1",
        "127.0.0.1.",
        "256.0.0.1",
        "1.2.3",
        "::1::",
        "[::1]",
        " 8.8.8.8",
    ],
)
def test_check_address_unparseable_is_refused(address: str) -> None:
    with pytest.raises(TargetRefused):
        check_address("h", address, allow_private=False)


def test_check_address_unparseable_passes_when_private_allowed() -> None:
    check_address("h", "not an address", allow_private=True)


# --------------------------------------------------------------------------
# Properties over whole networks
# --------------------------------------------------------------------------

PRIVATE_V4_NETS = [
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "224.0.0.0/4",
    "240.0.0.0/4",
]
PRIVATE_V6_NETS = ["::1/128", "fe80::/10", "fc00::/7", "ff00::/8", "64:ff9b:1::/48"]


@st.composite
def addresses_in(draw: st.DrawFn, nets: list[str]) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    net = ipaddress.ip_network(draw(st.sampled_from(nets)))
    offset = draw(st.integers(min_value=0, max_value=net.num_addresses - 1))
    return net[offset]


v4_any = st.integers(min_value=0, max_value=2**32 - 1).map(ipaddress.IPv4Address)


@PROPS
@given(addresses_in(PRIVATE_V4_NETS))
def test_private_v4_networks_refused(ip: ipaddress.IPv4Address) -> None:
    assert not address_allowed(ip)
    with pytest.raises(TargetRefused):
        check_address("h", str(ip), allow_private=False)


@PROPS
@given(addresses_in(PRIVATE_V6_NETS))
def test_private_v6_networks_refused(ip: ipaddress.IPv6Address) -> None:
    assert not address_allowed(ip)
    with pytest.raises(TargetRefused):
        check_address("h", str(ip), allow_private=False)


@PROPS
@given(addresses_in(PRIVATE_V4_NETS))
def test_private_v4_refused_in_every_ipv6_embedding(ip: ipaddress.IPv4Address) -> None:
    v4 = int(ip)
    forms = [
        ipaddress.IPv6Address((0xFFFF << 32) | v4),  # ::ffff:a.b.c.d (mapped)
        ipaddress.IPv6Address((0x2002 << 112) | (v4 << 80)),  # 6to4
        ipaddress.IPv6Address((0x2002 << 112) | (v4 << 80) | 0xDEAD),  # 6to4, any host
        ipaddress.IPv6Address(int(ipaddress.IPv6Address("64:ff9b::")) | v4),  # NAT64
        ipaddress.IPv6Address(v4),  # ::a.b.c.d (IPv4-compatible)
        ipaddress.IPv6Address((0xFFFF << 48) | v4),  # ::ffff:0:a.b.c.d (SIIT)
    ]
    for form in forms:
        assert not address_allowed(form), form
        with pytest.raises(TargetRefused):
            check_address("h", str(form), allow_private=False)


@PROPS
@given(v4_any)
def test_embedding_never_launders_an_address(ip: ipaddress.IPv4Address) -> None:
    """An IPv6 form embedding an IPv4 address is never more permissive than it."""
    v4 = int(ip)
    verdict = address_allowed(ip)
    forms = [
        ipaddress.IPv6Address((0xFFFF << 32) | v4),
        ipaddress.IPv6Address((0x2002 << 112) | (v4 << 80)),
        ipaddress.IPv6Address(int(ipaddress.IPv6Address("64:ff9b::")) | v4),
        ipaddress.IPv6Address(v4),
        ipaddress.IPv6Address((0xFFFF << 48) | v4),
    ]
    for form in forms:
        if not verdict:
            assert not address_allowed(form), form


@PROPS
@given(v4_any)
def test_ipv4_mapped_and_nat64_agree_with_ipv4(ip: ipaddress.IPv4Address) -> None:
    # (6to4 is only checked one way, above: newer Pythons treat all of
    # 2002::/16 as non-global, which is stricter and fine.)
    v4 = int(ip)
    verdict = address_allowed(ip)
    assert address_allowed(ipaddress.IPv6Address((0xFFFF << 32) | v4)) == verdict
    nat64 = ipaddress.IPv6Address(int(ipaddress.IPv6Address("64:ff9b::")) | v4)
    assert address_allowed(nat64) == verdict


@PROPS
@given(st.one_of(v4_any, st.integers(0, 2**128 - 1).map(ipaddress.IPv6Address)))
def test_allow_private_accepts_any_address(
    ip: ipaddress.IPv4Address | ipaddress.IPv6Address,
) -> None:
    check_address("h", str(ip), allow_private=True)


@PROPS
@given(st.one_of(v4_any, st.integers(0, 2**128 - 1).map(ipaddress.IPv6Address)))
def test_check_address_agrees_with_address_allowed(
    ip: ipaddress.IPv4Address | ipaddress.IPv6Address,
) -> None:
    if address_allowed(ip):
        check_address("h", str(ip), allow_private=False)
        assert not ip.is_loopback
        assert not ip.is_private
        assert not ip.is_link_local
        assert not ip.is_multicast
        assert not ip.is_unspecified
    else:
        with pytest.raises(TargetRefused):
            check_address("h", str(ip), allow_private=False)


# --------------------------------------------------------------------------
# validate_url
# --------------------------------------------------------------------------

GOOD_URLS = [
    "http://example.com",
    "https://example.com",
    "https://example.com/",
    "https://example.com/webhooks",
    "https://hooks.example.com/v1/endpoint?token=abc&x=1",
    "https://example.com:8443/path",
    "http://example.com:80/",
    "https://example.com:65535/",
    "https://example.com/a/b#frag",
    "https://sub.domain.example.co.uk/postback/click?cid=123",
    "http://8.8.8.8/hook",
    "https://[2606:4700:4700::1111]/hook",
    "http://[2606:4700:4700::1111]:8080/hook",
    "HTTPS://EXAMPLE.COM/Path",
    "https://xn--bcher-kva.example/",
    "http://localhost:8080/",  # shape only: the address check happens after DNS
    "http://127.0.0.1:9000/",
]

BAD_URLS = [
    "",
    "ftp://example.com/file",
    "file:///etc/passwd",
    "gopher://example.com/",
    "javascript:alert(1)",
    "data:text/plain,hi",
    "ws://example.com/",
    "example.com",
    "//example.com/path",
    "/relative/path",
    "http://",
    "https://",
    "http:///path",
    "http://:80/",
    "http://?q=1",
    "https://user:pass@example.com/",
    "https://user@example.com/",
    "https://:secret@example.com/",
    "http://user:p%40ss@example.com/",
    "http://example.com\\@127.0.0.1/",
    "http://exa mple.com/",
    "http://example.com/a b",
    " http://example.com/",
    "http://example.com/ ",
    "http://example.com/\r\nX-Injected: 1",
    "http://example.com/\n",
    "http://example.com/\r",
    "http://example.com/\t",
    "http://example.com/\x00",
    "http://example.com/\x7f",
    "http://example.com:0/",
    "http://example.com:65536/",
    "http://example.com:99999/",
    "http://example.com:-1/",
    "http://example.com:abc/",
    "http://[::1/",
    "http://[not-an-ip]/",
    "https://example.com/" + "a" * 2048,
]


@pytest.mark.parametrize("url", GOOD_URLS)
def test_validate_url_accepts(url: str) -> None:
    assert validate_url(url) == url


@pytest.mark.parametrize("url", BAD_URLS)
def test_validate_url_refuses(url: str) -> None:
    with pytest.raises(BadInput) as excinfo:
        validate_url(url)
    assert "\n" not in str(excinfo.value)


def test_validate_url_length_limit() -> None:
    base = "https://example.com/"
    ok = base + "a" * (2048 - len(base))
    assert validate_url(ok) == ok
    with pytest.raises(BadInput):
        validate_url(ok + "a")


def test_validate_url_non_string() -> None:
    with pytest.raises(BadInput):
        validate_url(None)  # type: ignore[arg-type]
    with pytest.raises(BadInput):
        validate_url(b"https://example.com/")  # type: ignore[arg-type]


def test_validate_url_does_not_leak_credentials_in_message() -> None:
    with pytest.raises(BadInput) as excinfo:
        validate_url("https://alice:hunter2@example.com/")
    assert "hunter2" not in str(excinfo.value)


@PROPS
@given(
    st.sampled_from(["http", "https"]),
    st.from_regex(r"[a-z0-9]([a-z0-9-]{0,20}[a-z0-9])?(\.[a-z0-9]{1,10}){1,3}", fullmatch=True),
    st.none() | st.integers(min_value=1, max_value=65535),
    st.from_regex(r"(/[A-Za-z0-9._~%-]{0,12}){0,4}", fullmatch=True),
)
def test_validate_url_accepts_generated(
    scheme: str, host: str, port: int | None, path: str
) -> None:
    # All digits and dots is an IPv4 address or nothing (see the tests below).
    assume(not host.replace(".", "").isdigit())
    url = f"{scheme}://{host}{'' if port is None else f':{port}'}{path}"
    assert validate_url(url) == url


@PROPS
@given(
    st.sampled_from(["http://example.com/", "https://example.com/a?b=c"]),
    st.sampled_from([" ", "\r", "\n", "\t", "\x00", "\x0b", "\x1b", "\x7f", "\u2028", "\x85"]),
    st.data(),
)
def test_validate_url_refuses_any_whitespace_or_control(
    url: str, bad: str, data: st.DataObject
) -> None:
    pos = data.draw(st.integers(min_value=0, max_value=len(url)))
    with pytest.raises(BadInput):
        validate_url(url[:pos] + bad + url[pos:])


@PROPS
@given(st.text(max_size=80))
def test_validate_url_only_raises_bad_input(url: str) -> None:
    try:
        got = validate_url(url)
    except BadInput:
        return
    assert got == url
    assert url.lower().startswith(("http://", "https://"))


# --------------------------------------------------------------------------
# literal_address
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("127.0.0.1", "127.0.0.1"),
        ("8.8.8.8", "8.8.8.8"),
        ("::1", "::1"),
        ("[::1]", "::1"),
        ("[2606:4700:4700::1111]", "2606:4700:4700::1111"),
        ("fe80::1%eth0", "fe80::1"),
        ("[fe80::1%25eth0]", "fe80::1"),
        ("::ffff:127.0.0.1", "::ffff:7f00:1"),
    ],
)
def test_literal_address(host: str, expected: str) -> None:
    assert literal_address(host) == ipaddress.ip_address(expected)


@pytest.mark.parametrize(
    "host",
    ["example.com", "localhost", "", "[]", "127.1", "0x7f000001", "2130706433", "1.2.3.4.5"],
)
def test_literal_address_not_an_address(host: str) -> None:
    assert literal_address(host) is None


@PROPS
@given(st.one_of(v4_any, st.integers(0, 2**128 - 1).map(ipaddress.IPv6Address)))
def test_literal_address_round_trip(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> None:
    assert literal_address(str(ip)) == ip
    if isinstance(ip, ipaddress.IPv6Address):
        assert literal_address(f"[{ip}]") == ip


@PROPS
@given(st.from_regex(r"[a-z][a-z0-9-]{0,20}(\.[a-z]{2,6}){0,3}", fullmatch=True))
def test_literal_address_hostnames_are_none(host: str) -> None:
    assert literal_address(host) is None


# --------------------------------------------------------------------------
# the sender's parser: accepted means sendable
# --------------------------------------------------------------------------

UNSENDABLE = [
    "http://xn--zz.example/hook",  # yarl encodes it, but it does not decode again
    "http://1.2.3.999/",  # digits and dots: aiohttp sends only canonical quads
    "http://08.0.0.1/",
    "http://127.0.0.1./",
    "http://1.2.3.4.5/",
    "http://a..b/",
    "http://exa%20mple.com/",
    "http://%31%32%37.0.0.1/",
    "http://ex$ample.com/",
]


@pytest.mark.parametrize("url", UNSENDABLE)
def test_validate_url_refuses_what_the_sender_cannot_send(url: str) -> None:
    with pytest.raises(BadInput):
        validate_url(url)


@pytest.mark.parametrize(
    "url",
    ["http://Bücher.example/x", "http://例え.テスト/", "http://ß.example/", "http://a_b.example/"],
)
def test_validate_url_accepts_international_names(url: str) -> None:
    assert validate_url(url) == url
    wire = EndpointWire(url, ("whsec_" + "A" * 32,), 1000, allow_private=False)
    assert wire.url_refusal is None and wire.target.raw_host.isascii()


LOOPBACK_FORMS = ["2130706433", "0177.0.0.1", "127.1", "0x7f000001", "0x7f.1", "017700000001"]


@pytest.mark.parametrize("host", LOOPBACK_FORMS)
def test_non_canonical_loopback_is_refused_as_loopback(host: str) -> None:
    why = target_refusal(host, allow_private=False)
    assert why is not None and "127.0.0.1" in why and "non-public" in why
    with pytest.raises(BadInput, match="DISPATCHER_ALLOW_PRIVATE_TARGETS"):
        check_target(f"http://{host}:8080/hook", TargetPolicy())
    wire = EndpointWire(f"http://{host}/", ("whsec_" + "A" * 32,), 1000, allow_private=False)
    assert wire.url_refusal is not None and "127.0.0.1" in wire.url_refusal


@pytest.mark.parametrize("host", [*LOOPBACK_FORMS, "134744072"])
def test_non_canonical_forms_are_refused_even_where_allowed(host: str) -> None:
    # aiohttp will not send to them: refusing is the only honest answer.
    why = target_refusal(host, allow_private=True)
    assert why is not None and "canonical" in why
    with pytest.raises(BadInput):
        check_target(f"http://{host}/", TargetPolicy(allow_private=True))


def test_an_unreadable_bracketed_host_is_bad_input() -> None:
    for url in ("http://[]@/hook", "http://][@/hook"):
        with pytest.raises(BadInput, match="not valid"):
            validate_url(url)


def test_canonical_and_names_are_left_to_the_address_check() -> None:
    assert target_refusal("8.8.8.8", allow_private=False) is None
    assert target_refusal("example.com", allow_private=False) is None
    assert target_refusal("127.0.0.1", allow_private=True) is None
    assert target_refusal("10.0.0.1", allow_private=False, allowed_networks=("10.0.0.0/8",)) is None
    assert "non-public" in (target_refusal("127.0.0.1", allow_private=False) or "")
    check_target("http://8.8.8.8/", TargetPolicy())
    check_target("http://127.0.0.1:9/", TargetPolicy(allow_private=True))


@PROPS
@given(st.text(max_size=60))
def test_whatever_validate_url_accepts_the_sender_can_build(host: str) -> None:
    # Macro marks are the template's to judge (test_postback_macros): "a/{"
    # is a host and a path with an unbalanced brace, refused at add.
    assume(not set(host) & set("{}#"))
    url = f"http://{host}/hook"
    try:
        validate_url(url)
    except BadInput:
        return
    wire = EndpointWire(url, ("whsec_" + "A" * 32,), 1000, allow_private=True)
    assert wire.target.host is not None  # the decoding aiohttp does
