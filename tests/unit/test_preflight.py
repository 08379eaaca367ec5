"""The admin token's rule at start (issue 25): short is a warning on
loopback or when allowed, a refusal on any other address."""

from __future__ import annotations

import pytest

from dispatcher.ops.preflight import MIN_ADMIN_TOKEN, admin_token_problem, is_loopback


@pytest.mark.parametrize(
    ("token", "host", "allow", "warns", "refuses"),
    [
        (None, "0.0.0.0", False, False, False),  # generated: long enough
        ("x" * MIN_ADMIN_TOKEN, "0.0.0.0", False, False, False),
        ("abc", "127.0.0.1", False, True, False),
        ("abc", "localhost", False, True, False),
        ("abc", "::1", False, True, False),
        ("abc", "0.0.0.0", False, True, True),
        ("abc", "10.1.2.3", False, True, True),
        ("abc", "::", False, True, True),
        ("abc", "0.0.0.0", True, True, False),
    ],
)
def test_admin_token_rule(
    token: str | None, host: str, allow: bool, warns: bool, refuses: bool
) -> None:
    words, refuse = admin_token_problem(token, host, allow)
    assert bool(words) is warns and refuse is refuses
    if refuse:
        assert "DISPATCHER_ALLOW_WEAK_ADMIN_TOKEN=1" in words and host in words


def test_loopback() -> None:
    assert is_loopback("127.0.0.2") and is_loopback("[::1]") and is_loopback("LOCALHOST")
    assert not is_loopback("0.0.0.0") and not is_loopback("example.com")
