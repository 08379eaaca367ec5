"""What one application may set, and what its receivers can make us store
(SPEC "Limits"): ranges, RE2 patterns, dot segments, the error vocabulary."""

from __future__ import annotations

import errno
import math
import ssl
from dataclasses import replace

import aiohttp
import pytest
from aiohttp.client_reqrep import ConnectionKey
from hypothesis import given
from hypothesis import strategies as st

from dispatcher.core.errors import BadInput
from dispatcher.core.models import RANGES, EndpointSettings, out_of_range
from dispatcher.core.shaping import body_matches, compile_success_body, encode, parse_template
from dispatcher.ops.inputs import spec_from_fields
from dispatcher.worker.sender import attempt_error, refused_target

URL = "https://hooks.example.com/x"
SECRET = "CLICK-SECRET-123"
INTEGRAL = set(RANGES) - {"rate_per_s", "cooldown_s", "disable_within_s"}


def _with(name: str, value: object) -> EndpointSettings:
    return replace(EndpointSettings(), **{name: value})


@pytest.mark.parametrize("name", sorted(RANGES))
def test_each_range_is_inclusive_and_named(name: str) -> None:
    low, high = RANGES[name]
    kind = int if name in INTEGRAL else float
    assert out_of_range(_with(name, kind(low))) is None
    assert out_of_range(_with(name, kind(high))) is None
    below = low - 1 if name in INTEGRAL else low / 2 if low else -0.5
    for value in (kind(below), kind(high + 1)):
        said = out_of_range(_with(name, value))
        assert said is not None and said.startswith(f"{name} must be between ")


@pytest.mark.parametrize("name", sorted(RANGES))
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, 1e308, -1e308, True, "5"])
def test_non_finite_and_wrong_types_are_out_of_every_range(name: str, value: object) -> None:
    assert out_of_range(_with(name, value)) is not None


@given(
    name=st.sampled_from(sorted(RANGES)),
    value=st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers()),
)
def test_out_of_range_agrees_with_the_table(name: str, value: float) -> None:
    low, high = RANGES[name]
    wanted_int = name in INTEGRAL
    ok = (isinstance(value, int) or not wanted_int) and low <= value <= high
    assert (out_of_range(_with(name, value)) is None) == ok


def test_ranges_are_the_specs() -> None:
    assert RANGES == {
        "rate_per_s": (0.001, 100_000), "burst": (1, 100_000), "max_in_flight": (1, 10_000),
        "timeout_ms": (100, 300_000), "max_attempts": (1, 100),
        "retry_base_ms": (0, 86_400_000), "retry_cap_ms": (0, 604_800_000),
        "failure_threshold": (1, 10_000), "cooldown_s": (1, 86_400),
        # Ours (postbacks, issue 24): the SPEC gives no range.
        "disable_after": (1, 1_000), "disable_within_s": (1, 2_592_000),
    }  # fmt: skip


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [
        ("rate_per_s", 1e308, "rate_per_s must be between 0.001 and 100000"),
        ("rate_per_s", 10**400, "rate_per_s must be between 0.001 and 100000"),
        ("burst", 0, "burst must be between 1 and 100000"),
        ("max_in_flight", 2**63, "max_in_flight must be between 1 and 10000"),
        ("timeout_ms", 99, "timeout_ms must be between 100 and 300000"),
        ("max_attempts", 101, "max_attempts must be between 1 and 100"),
        ("retry_base_ms", -1, "retry_base_ms must be between 0 and 86400000"),
        ("retry_cap_ms", 604_800_001, "retry_cap_ms must be between 0 and 604800000"),
        ("failure_threshold", 10_001, "failure_threshold must be between 1 and 10000"),
        ("cooldown_s", 0.5, "cooldown_s must be between 1 and 86400"),
    ],
)
def test_entry_points_refuse_with_the_field_and_its_range(
    field: str, value: float, said: str
) -> None:
    with pytest.raises(BadInput) as caught:
        spec_from_fields({"url": URL, field: value})
    assert str(caught.value) == said


# ---------------------------------------------------------------- success_body


@pytest.mark.parametrize("pattern", ["(?=ok)", "(?!x)ok", "(?<=a)b", r"(a)\1", r"(?P<x>a)(?P=x)"])
def test_patterns_that_need_backtracking_are_refused(pattern: str) -> None:
    with pytest.raises(BadInput, match="RE2"):
        compile_success_body(pattern)


@pytest.mark.parametrize(
    ("pattern", "body", "matches"),
    [
        (r'"success":\s*true', b'{"success": true}', True),
        (r'"success":\s*true', b'{"success": false}', False),
        ("^OK$", b"OK", True),
        ("(?i)accepted", b"ACCEPTED", True),
        (r"\d{3}", b"id 123", True),
    ],
)
def test_usual_patterns_work(pattern: str, body: bytes, matches: bool) -> None:
    m = compile_success_body(pattern)
    assert m is not None and body_matches(m, body) is matches


def test_a_catastrophic_pattern_is_linear() -> None:
    """(a+)+$ against a…a! takes Python's re exponential time; RE2 does not
    backtrack (this test would not finish with re)."""
    m = compile_success_body("(a+)+$")
    assert m is not None
    assert not body_matches(m, b"a" * 4000 + b"!")
    assert body_matches(m, b"a" * 4000)


# ---------------------------------------------------------------- dot segments


@pytest.mark.parametrize(("value", "sent"), [(".", "%2E"), ("..", "%2E%2E"), ("...", "..."),
                                             ("a.b", "a.b"), ("./", ".%2F")])  # fmt: skip
def test_a_dot_value_is_never_a_dot_segment(value: str, sent: str) -> None:
    assert encode(value) == sent


def test_a_dot_dot_macro_stays_in_its_segment() -> None:
    t = parse_template("https://h.example/m/{x}/y?q={x}")
    assert t.render({"x": ".."}, {}) == "https://h.example/m/%2E%2E/y?q=%2E%2E"


# ---------------------------------------------------------------- the error vocabulary

_KEY = ConnectionKey("hooks.example.com", 443, True, True, None, None, None)
_LEAKY = f"https://hooks.example.com/p?click_id={SECRET}&email=victim%40example.com <b>"


def _os(code: int) -> OSError:
    return OSError(code, f"{_LEAKY} {code}")


@pytest.mark.parametrize(
    ("exc", "said"),
    [
        (aiohttp.ClientConnectorError(_KEY, _os(errno.ECONNREFUSED)), "connection refused"),
        (aiohttp.ClientConnectorError(_KEY, _os(errno.ECONNRESET)), "connection reset"),
        (aiohttp.ClientConnectorError(_KEY, _os(errno.EHOSTUNREACH)),
         "connection error: host unreachable"),
        (aiohttp.ClientConnectorError(_KEY, _os(errno.EACCES)), "connection error"),
        (aiohttp.ClientConnectorDNSError(_KEY, _os(-2)), "dns: name did not resolve"),
        (aiohttp.ClientConnectorCertificateError(_KEY, ssl.SSLCertVerificationError(_LEAKY)),
         "tls: certificate not trusted"),
        (aiohttp.ClientConnectorSSLError(_KEY, ssl.SSLError(_LEAKY)), "tls: handshake failed"),
        (aiohttp.ServerDisconnectedError(_LEAKY),
         "connection reset: closed before the response"),
        (aiohttp.ClientOSError(errno.ECONNRESET, _LEAKY), "connection reset"),
        (ConnectionResetError(_LEAKY), "connection reset"),
        (aiohttp.ClientPayloadError(_LEAKY), "bad response: body"),
        (aiohttp.ClientResponseError(None, (), status=400, message=_LEAKY),  # type: ignore[arg-type]
         "bad response"),
        (aiohttp.ClientHttpProxyError(None, (), status=407, message=_LEAKY),  # type: ignore[arg-type]
         "proxy: HTTP 407"),
        (aiohttp.ServerTimeoutError(_LEAKY), "timeout"),
        (aiohttp.InvalidUrlClientError(_LEAKY), "url invalid"),
        (aiohttp.ClientError(_LEAKY), "request failed (ClientError)"),
    ],
)  # fmt: skip
def test_attempt_errors_are_a_class_never_the_exception_text(exc: BaseException, said: str) -> None:
    assert attempt_error(exc) == said
    assert SECRET not in said and "example" not in said and "<" not in said


@pytest.mark.parametrize(
    ("reason", "kind"),
    [
        ("hooks.example.com resolves to a non-public address (10.0.0.1)", "non-public address"),
        ("2130706433 is 127.0.0.1, a non-public address", "non-public address"),
        ("0x7f.1 is not a canonical IPv4 address (write it as 127.0.0.1)", "not a canonical"),
        ("hooks.example.com did not resolve", "name did not resolve"),
        ("hooks.example.com: unparseable address", "unparseable address"),
    ],
)
def test_refusals_say_which_kind_not_which_host(reason: str, kind: str) -> None:
    said = refused_target(reason)
    assert said.startswith(f"refused target: {kind}")
    assert "example" not in said and "127.0.0.1" not in said and "10.0.0.1" not in said
