"""Unit tests for dispatcher.core.signing against the independent `standardwebhooks`
package (the public reference verifier).

SPEC: `webhook-signature` is `v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">`
keyed with the base64 key after `whsec_`; several space-separated signatures
while a rotated-out secret is in its grace period. Any receiver using the
public `standardwebhooks` verify library must accept them.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import time
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from dispatcher.core.errors import BadInput, DispatcherError
from dispatcher.core.signing import (
    SECRET_PREFIX,
    Signer,
    generate_secret,
    secret_key,
    sign,
)
from dispatcher.receiver import VerificationError, Verifier

PROPS = settings(max_examples=200, deadline=None, database=None)

# Deterministic example secrets (24-byte keys, like Svix / generate_secret).
KEY_A = bytes(range(24))
KEY_B = bytes(range(100, 124))
KEY_C = b"\xff" * 32
SECRET_A = "whsec_" + base64.b64encode(KEY_A).decode()
SECRET_B = "whsec_" + base64.b64encode(KEY_B).decode()
SECRET_C = "whsec_" + base64.b64encode(KEY_C).decode()
# The well-known example from the Standard Webhooks / Svix documentation.
DOC_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

MSG_ID = "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W"
BODY = b'{"type":"conversion","data":{"amount":42,"currency":"EUR"}}'

SIG_RE = re.compile(r"^v1,[A-Za-z0-9+/]{43}=( v1,[A-Za-z0-9+/]{43}=)*$")


def _headers(msg_id: str, timestamp: int, signature: str) -> dict[str, str]:
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signature,
    }


def _verified(secrets: tuple[str, ...], msg_id: str, ts: int, body: bytes, header: str) -> bool:
    """dispatcher's own verifier (the receiver kit's), as a yes / no on one
    signature header, checked at the request's own timestamp."""
    try:
        Verifier(secrets).verify(body, _headers(msg_id, ts, header), now=ts)
    except VerificationError:
        return False
    return True


def _now() -> int:
    # Reading the clock is not I/O; the reference verifier insists on a
    # timestamp within five minutes of now.
    return int(time.time())


def _reference_sig(key: bytes, msg_id: str, timestamp: int, body: bytes) -> str:
    mac = hmac.new(key, f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256)
    return "v1," + base64.b64encode(mac.digest()).decode()


# --------------------------------------------------------------------------
# Fixed examples
# --------------------------------------------------------------------------


def test_known_vector_matches_reference_library() -> None:
    ts = 1_614_265_330
    body = '{"test": 2432232314}'
    ours = sign(DOC_SECRET, "msg_p5jXN8AQM9LWM0D4loKWxJek", ts, body.encode())
    theirs = Webhook(DOC_SECRET).sign(
        "msg_p5jXN8AQM9LWM0D4loKWxJek", datetime.fromtimestamp(ts, tz=UTC), body
    )
    assert ours == theirs
    # The published expected value for this example.
    assert ours == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def test_single_secret_verifies_with_standardwebhooks() -> None:
    ts = _now()
    header = Signer((SECRET_A,)).signature(MSG_ID, ts, BODY)
    assert SIG_RE.match(header)
    assert " " not in header
    payload = Webhook(SECRET_A).verify(BODY, _headers(MSG_ID, ts, header))
    assert payload == json.loads(BODY)


def test_two_secrets_each_verify_alone() -> None:
    ts = _now()
    header = Signer((SECRET_A, SECRET_B)).signature(MSG_ID, ts, BODY)
    assert SIG_RE.match(header)
    parts = header.split(" ")
    assert len(parts) == 2
    # Current secret first, then the rotated-out one.
    assert parts[0] == sign(SECRET_A, MSG_ID, ts, BODY)
    assert parts[1] == sign(SECRET_B, MSG_ID, ts, BODY)
    headers = _headers(MSG_ID, ts, header)
    assert Webhook(SECRET_A).verify(BODY, headers) == json.loads(BODY)
    assert Webhook(SECRET_B).verify(BODY, headers) == json.loads(BODY)
    # A secret that is in neither slot is refused.
    with pytest.raises(WebhookVerificationError):
        Webhook(SECRET_C).verify(BODY, headers)


def test_three_secrets_each_verify_alone() -> None:
    ts = _now()
    header = Signer((SECRET_A, SECRET_B, SECRET_C)).signature(MSG_ID, ts, BODY)
    assert len(header.split(" ")) == 3
    for secret in (SECRET_A, SECRET_B, SECRET_C):
        Webhook(secret).verify(BODY, _headers(MSG_ID, ts, header))


@pytest.mark.parametrize(
    "tampered",
    [
        BODY + b" ",
        b" " + BODY,
        BODY.replace(b"42", b"43"),
        BODY.replace(b"EUR", b"USD"),
        b"{}",
    ],
)
@pytest.mark.parametrize("secret", [SECRET_A, SECRET_B])
def test_tampered_body_fails(tampered: bytes, secret: str) -> None:
    ts = _now()
    header = Signer((SECRET_A, SECRET_B)).signature(MSG_ID, ts, BODY)
    headers = _headers(MSG_ID, ts, header)
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(tampered, headers)
    assert not _verified((secret,), MSG_ID, ts, tampered, header)


@pytest.mark.parametrize("secret", [SECRET_A, SECRET_B])
def test_tampered_id_or_timestamp_fails(secret: str) -> None:
    ts = _now()
    header = Signer((SECRET_A, SECRET_B)).signature(MSG_ID, ts, BODY)
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(BODY, _headers(MSG_ID + "x", ts, header))
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(BODY, _headers(MSG_ID, ts - 1, header))
    assert not _verified((secret,), MSG_ID + "x", ts, BODY, header)
    assert not _verified((secret,), MSG_ID, ts - 1, BODY, header)


def test_tampered_signature_fails() -> None:
    ts = _now()
    header = sign(SECRET_A, MSG_ID, ts, BODY)
    raw = bytearray(base64.b64decode(header[3:]))
    raw[0] ^= 1
    bad = "v1," + base64.b64encode(bytes(raw)).decode()
    with pytest.raises(WebhookVerificationError):
        Webhook(SECRET_A).verify(BODY, _headers(MSG_ID, ts, bad))
    assert not _verified((SECRET_A,), MSG_ID, ts, BODY, bad)


def test_each_attempt_has_its_own_timestamp_signature() -> None:
    signer = Signer((SECRET_A,))
    assert signer.signature(MSG_ID, 1_700_000_000, BODY) != signer.signature(
        MSG_ID, 1_700_000_001, BODY
    )


def test_signer_is_reusable_and_stateless() -> None:
    signer = Signer((SECRET_A, SECRET_B))
    first = signer.signature(MSG_ID, 1_700_000_000, BODY)
    signer.signature("other", 1, b"something else")
    assert signer.signature(MSG_ID, 1_700_000_000, BODY) == first


def test_prefixless_secret_is_the_same_key() -> None:
    bare = SECRET_A[len(SECRET_PREFIX) :]
    assert secret_key(bare) == secret_key(SECRET_A) == KEY_A
    ts = _now()
    assert sign(bare, MSG_ID, ts, BODY) == sign(SECRET_A, MSG_ID, ts, BODY)
    Webhook(bare).verify(BODY, _headers(MSG_ID, ts, sign(bare, MSG_ID, ts, BODY)))


# --------------------------------------------------------------------------
# Secrets
# --------------------------------------------------------------------------


def test_generate_secret_shape() -> None:
    s = generate_secret()
    assert s.startswith("whsec_")
    assert SECRET_PREFIX == "whsec_"
    key = secret_key(s)
    assert len(key) == 24
    assert base64.b64encode(key).decode() == s[len(SECRET_PREFIX) :]


def test_generate_secret_is_random() -> None:
    assert len({generate_secret() for _ in range(50)}) == 50


def test_generated_secret_verifies_with_standardwebhooks() -> None:
    s = generate_secret()
    ts = _now()
    Webhook(s).verify(BODY, _headers(MSG_ID, ts, sign(s, MSG_ID, ts, BODY)))


@pytest.mark.parametrize(
    "secret",
    [
        "",
        "whsec_",
        "whsec_!!!!not-base64!!!!",
        "whsec_" + base64.b64encode(b"k" * 24).decode() + "!",
        "whsec_" + base64.b64encode(b"k" * 24).decode() + " ",
        "whsec_" + base64.b64encode(b"k" * 15).decode(),  # key too short
        "whsec_" + base64.b64encode(b"k" * 65).decode(),  # key too long
        "whsec_" + base64.b64encode(b"k" * 16).decode().rstrip("="),  # bad padding
        "whsec_abc",
    ],
)
def test_malformed_secret_is_bad_input(secret: str) -> None:
    with pytest.raises(BadInput):
        secret_key(secret)
    with pytest.raises(BadInput):
        Signer((secret,))
    with pytest.raises(DispatcherError):
        sign(secret, MSG_ID, 1, BODY)


@pytest.mark.parametrize("n", [16, 24, 32, 64])
def test_key_lengths_accepted(n: int) -> None:
    key = bytes(range(n))
    assert secret_key("whsec_" + base64.b64encode(key).decode()) == key


def test_bad_secret_among_several_is_refused() -> None:
    with pytest.raises(BadInput):
        Signer((SECRET_A, "whsec_nope"))


# --------------------------------------------------------------------------
# the receiver kit's verifier (our own)
# --------------------------------------------------------------------------


def test_receiver_verifier_accepts_any_valid_entry() -> None:
    header = Signer((SECRET_A, SECRET_B)).signature(MSG_ID, 1_700_000_000, BODY)
    assert _verified((SECRET_A,), MSG_ID, 1_700_000_000, BODY, header)
    assert _verified((SECRET_B,), MSG_ID, 1_700_000_000, BODY, header)
    assert _verified((SECRET_C, SECRET_B), MSG_ID, 1_700_000_000, BODY, header)
    assert not _verified((SECRET_C,), MSG_ID, 1_700_000_000, BODY, header)
    with pytest.raises(ValueError, match="at least one"):
        Verifier(())


@pytest.mark.parametrize(
    "header",
    ["", " ", "v1,", "v1", "garbage", "v2,abc", "v1a,xyz", ",,,", "v1,not base64 at all"],
)
def test_receiver_verifier_garbage_is_false(header: str) -> None:
    assert not _verified((SECRET_A,), MSG_ID, 1_700_000_000, BODY, header)


def test_receiver_verifier_ignores_other_versions() -> None:
    good = sign(SECRET_A, MSG_ID, 1_700_000_000, BODY)
    v2 = "v2," + good[3:]
    assert not _verified((SECRET_A,), MSG_ID, 1_700_000_000, BODY, v2)
    assert _verified((SECRET_A,), MSG_ID, 1_700_000_000, BODY, f"{v2} {good}")
    assert _verified((SECRET_A,), MSG_ID, 1_700_000_000, BODY, f"v1,AAAA  {good}")


# --------------------------------------------------------------------------
# Properties
# --------------------------------------------------------------------------

keys = st.binary(min_size=16, max_size=64)
msg_ids = st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=40)
ascii_ids = st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=40)
timestamps = st.integers(min_value=0, max_value=2**33)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53), max_value=2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(exclude_categories=["Cs"]), max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)


def _secret(key: bytes) -> str:
    return "whsec_" + base64.b64encode(key).decode()


@PROPS
@given(keys, msg_ids, timestamps, json_values)
def test_matches_reference_sign(key: bytes, msg_id: str, ts: int, value: object) -> None:
    secret = _secret(key)
    body = json.dumps(value, ensure_ascii=False).encode()
    ours = sign(secret, msg_id, ts, body)
    theirs = Webhook(secret).sign(msg_id, datetime.fromtimestamp(ts, tz=UTC), body.decode())
    assert ours == theirs


@PROPS
@given(keys, msg_ids, timestamps, st.binary(max_size=300))
def test_matches_plain_hmac_for_any_bytes(key: bytes, msg_id: str, ts: int, body: bytes) -> None:
    assert sign(_secret(key), msg_id, ts, body) == _reference_sig(key, msg_id, ts, body)


@PROPS
@given(
    st.lists(keys, min_size=1, max_size=4, unique=True),
    ascii_ids,
    st.integers(min_value=-240, max_value=240),
    json_values,
)
def test_every_secret_verifies_with_standardwebhooks(
    key_list: list[bytes], msg_id: str, skew: int, value: object
) -> None:
    secrets = tuple(_secret(k) for k in key_list)
    ts = _now() + skew
    body = json.dumps(value).encode()
    header = Signer(secrets).signature(msg_id, ts, body)
    assert SIG_RE.match(header)
    assert len(header.split(" ")) == len(secrets)
    headers = _headers(msg_id, ts, header)
    for secret in secrets:
        assert Webhook(secret).verify(body, headers) == json.loads(body)
        assert _verified((secret,), msg_id, ts, body, header)


@PROPS
@given(
    st.lists(keys, min_size=1, max_size=3, unique=True),
    ascii_ids,
    json_values,
    st.binary(min_size=1, max_size=8),
    st.data(),
)
def test_tampered_body_never_verifies(
    key_list: list[bytes], msg_id: str, value: object, extra: bytes, data: st.DataObject
) -> None:
    secrets = tuple(_secret(k) for k in key_list)
    ts = _now()
    body = json.dumps(value).encode()
    header = Signer(secrets).signature(msg_id, ts, body)
    pos = data.draw(st.integers(min_value=0, max_value=len(body)))
    tampered = body[:pos] + extra + body[pos:]
    headers = _headers(msg_id, ts, header)
    for secret in secrets:
        assert not _verified((secret,), msg_id, ts, tampered, header)
        try:
            text = tampered.decode()
        except UnicodeDecodeError:
            continue  # the reference verifier cannot even read it
        with pytest.raises(WebhookVerificationError):
            Webhook(secret).verify(text, headers)


@PROPS
@given(keys, keys, ascii_ids, timestamps, st.binary(max_size=64))
def test_other_key_never_verifies(
    key: bytes, other: bytes, msg_id: str, ts: int, body: bytes
) -> None:
    if key == other:
        return
    header = sign(_secret(key), msg_id, ts, body)
    assert not _verified((_secret(other),), msg_id, ts, body, header)
    assert _verified((_secret(other), _secret(key)), msg_id, ts, body, header)


@PROPS
@given(
    st.lists(keys, min_size=1, max_size=3),
    st.lists(st.tuples(msg_ids, timestamps, st.binary(max_size=64)), min_size=1, max_size=6),
)
def test_reused_signer_equals_fresh_signatures(
    key_list: list[bytes], messages: list[tuple[str, int, bytes]]
) -> None:
    secrets = tuple(_secret(k) for k in key_list)
    signer = Signer(secrets)
    for msg_id, ts, body in messages:
        expected = " ".join(sign(s, msg_id, ts, body) for s in secrets)
        assert signer.signature(msg_id, ts, body) == expected
