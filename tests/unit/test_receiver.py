"""Unit tests for the receiver kit's verifier (dispatcher.receiver), pure.

Signatures come from two independent signers: dispatcher's own `Signer`
(what goes on the wire) and the public `standardwebhooks` package. Every
refusal must be a VerificationError whose message leaks neither the body nor
a secret; the clock is pinned with `now` so the window edges are exact.
"""

from __future__ import annotations

import base64
import string
import time
from collections.abc import Mapping
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from multidict import CIMultiDict
from standardwebhooks import Webhook

from dispatcher.core.signing import Signer, sign
from dispatcher.receiver import (
    DEFAULT_TOLERANCE_S,
    VerificationError,
    Verifier,
    claim_once,
    ensure_idempotency_table,
    verify,
    verify_request,
    webhook_middleware,
)

PROPS = settings(max_examples=300, deadline=None, database=None)

SECRET_A = "whsec_" + base64.b64encode(bytes(range(24))).decode()
SECRET_B = "whsec_" + base64.b64encode(bytes(range(100, 124))).decode()
SECRET_C = "whsec_" + base64.b64encode(b"\xff" * 32).decode()
DOC_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"  # the Standard Webhooks example

MSG_ID = "evt_2KWPBgLlAfxdpx2AI54pPJ85f4W"
TS = 1_700_000_000
BODY = b'{"type":"conversion","data":{"click_id":"c-9","amount":42}}'


def headers(msg_id: str = MSG_ID, ts: int | str = TS, sig: str | None = None,
            prefix: str = "webhook") -> dict[str, str]:  # fmt: skip
    signature = sig if sig is not None else sign(SECRET_A, msg_id, int(ts), BODY)
    return {
        f"{prefix}-id": msg_id,
        f"{prefix}-timestamp": str(ts),
        f"{prefix}-signature": signature,
    }


def refused(body: bytes, hdrs: Mapping[str, str], secrets: str | list[str] = SECRET_A,
            **kw: float) -> str:  # fmt: skip
    """The refusal message; also checks that it never leaks the body or a secret."""
    with pytest.raises(VerificationError) as info:
        verify(body, hdrs, secrets, now=kw.pop("now", TS), **kw)  # type: ignore[arg-type]
    message = str(info.value)
    assert message and "\n" not in message
    for secret in (SECRET_A, SECRET_B, SECRET_C):
        assert secret not in message and secret[6:] not in message
    if body:
        assert body.decode(errors="replace") not in message
    return message


# --------------------------------------------------------------------------
# Accepted
# --------------------------------------------------------------------------


def test_accepts_dispatcher_signer() -> None:
    hdrs = headers(sig=Signer((SECRET_A,)).signature(MSG_ID, TS, BODY))
    assert verify(BODY, hdrs, SECRET_A, now=TS) is None
    assert verify_request(BODY, hdrs, SECRET_A, now=TS) == MSG_ID
    assert verify_request(BODY, hdrs, [SECRET_A], now=TS) == MSG_ID
    assert Verifier(SECRET_A).verify(BODY, hdrs, now=TS) == MSG_ID


def test_accepts_standardwebhooks_signature() -> None:
    sig = Webhook(SECRET_B).sign(MSG_ID, datetime.fromtimestamp(TS, tz=UTC), BODY.decode())
    assert verify_request(BODY, headers(sig=sig), SECRET_B, now=TS) == MSG_ID


def test_published_example_vector() -> None:
    ts = 1_614_265_330
    hdrs = headers("msg_p5jXN8AQM9LWM0D4loKWxJek", ts,
                   "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")  # fmt: skip
    verify(b'{"test": 2432232314}', hdrs, DOC_SECRET, now=ts)


def test_uses_the_clock_by_default() -> None:
    now = int(time.time())
    hdrs = headers(ts=now, sig=sign(SECRET_A, MSG_ID, now, BODY))
    assert verify_request(BODY, hdrs, SECRET_A) == MSG_ID
    stale = TS  # 2023: far outside five minutes of the real clock
    assert "too old" in refused(BODY, headers(ts=stale), now=now)


def test_headers_are_case_insensitive() -> None:
    hdrs = {k.upper() if "sig" in k else k.title(): v for k, v in headers().items()}
    assert set(hdrs) == {"Webhook-Id", "Webhook-Timestamp", "WEBHOOK-SIGNATURE"}
    assert verify_request(BODY, hdrs, SECRET_A, now=TS) == MSG_ID
    multi = CIMultiDict(hdrs)
    assert verify_request(BODY, multi, SECRET_A, now=TS) == MSG_ID


def test_header_values_may_carry_surrounding_whitespace() -> None:
    hdrs = {k: f" {v}\t" for k, v in headers().items()}
    assert verify_request(BODY, hdrs, SECRET_A, now=TS) == MSG_ID


def test_first_of_repeated_headers_wins() -> None:
    multi = CIMultiDict(headers())
    multi.add("webhook-signature", "v1,AAAA")
    assert verify_request(BODY, multi, SECRET_A, now=TS) == MSG_ID
    flipped = CIMultiDict([("webhook-signature", "v1,AAAA"), *headers().items()])
    assert refused(BODY, flipped) == "no matching signature"


def test_svix_header_aliases() -> None:
    assert verify_request(BODY, headers(prefix="svix"), SECRET_A, now=TS) == MSG_ID
    assert verify_request(BODY, headers(prefix="Svix"), SECRET_A, now=TS) == MSG_ID
    # One family complete, the other partial: the complete one is used.
    mixed = {**headers(prefix="svix"), "webhook-id": "someone-else"}
    assert verify_request(BODY, mixed, SECRET_A, now=TS) == MSG_ID
    # Webhook-* wins when both families are complete.
    both = {**headers(prefix="svix", sig="v1,AAAA"), **headers()}
    assert verify_request(BODY, both, SECRET_A, now=TS) == MSG_ID


def test_window_edges_are_inclusive() -> None:
    verify(BODY, headers(), SECRET_A, now=TS + DEFAULT_TOLERANCE_S)
    verify(BODY, headers(), SECRET_A, now=TS - DEFAULT_TOLERANCE_S)
    verify(BODY, headers(), SECRET_A, now=TS + 300.0)
    verify(BODY, headers(), SECRET_A, 10, now=TS + 10)
    verify(BODY, headers(), SECRET_A, 0, now=TS)


# --------------------------------------------------------------------------
# Refused
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "tampered",
    [BODY + b" ", b" " + BODY, BODY.replace(b"42", b"43"), BODY.replace(b"c-9", b"c-8"),
     b"{}", b"", BODY[:-1]],
)  # fmt: skip
def test_tampered_body(tampered: bytes) -> None:
    assert refused(tampered, headers()) == "no matching signature"


def test_tampered_id_or_timestamp() -> None:
    sig = sign(SECRET_A, MSG_ID, TS, BODY)
    assert refused(BODY, headers(MSG_ID + "x", TS, sig)) == "no matching signature"
    assert refused(BODY, headers(MSG_ID, TS + 1, sig)) == "no matching signature"


def test_tampered_signature() -> None:
    raw = bytearray(base64.b64decode(sign(SECRET_A, MSG_ID, TS, BODY)[3:]))
    raw[-1] ^= 1
    bad = "v1," + base64.b64encode(bytes(raw)).decode()
    assert refused(BODY, headers(sig=bad)) == "no matching signature"


def test_wrong_secret() -> None:
    assert refused(BODY, headers(), SECRET_B) == "no matching signature"
    assert refused(BODY, headers(), [SECRET_B, SECRET_C]) == "no matching signature"


@pytest.mark.parametrize("skew", [DEFAULT_TOLERANCE_S + 1, 3600, 10**9])
def test_stale_timestamp_too_old(skew: int) -> None:
    assert "too old" in refused(BODY, headers(), now=TS + skew)


@pytest.mark.parametrize("skew", [DEFAULT_TOLERANCE_S + 1, 3600, TS])
def test_timestamp_from_the_future(skew: int) -> None:
    assert "too new" in refused(BODY, headers(), now=TS - skew)


def test_custom_tolerance() -> None:
    assert "too old" in refused(BODY, headers(), now=TS + 11, tolerance_s=10)
    assert "too new" in refused(BODY, headers(), now=TS - 11, tolerance_s=10)
    assert "too old" in refused(BODY, headers(), now=TS + 0.5, tolerance_s=0)


def test_stale_check_precedes_signature() -> None:
    # A captured request replayed later fails on its age, and so does a
    # forged one: the message does not tell a prober which part was wrong.
    assert "too old" in refused(BODY, headers(sig="v1,AAAA"), now=TS + 1000)


@pytest.mark.parametrize("missing", ["webhook-id", "webhook-timestamp", "webhook-signature"])
def test_missing_header(missing: str) -> None:
    hdrs = headers()
    del hdrs[missing]
    assert refused(BODY, hdrs) == f"missing {missing} header"
    hdrs[missing] = ""
    assert refused(BODY, hdrs) == f"missing {missing} header"
    hdrs[missing] = "   "
    assert refused(BODY, hdrs) == f"missing {missing} header"


def test_missing_all_headers() -> None:
    msg = refused(BODY, {})
    assert msg == "missing webhook-id, webhook-timestamp, webhook-signature headers"
    assert refused(BODY, {"content-type": "application/json"}) == msg


def test_missing_svix_header_is_reported_by_its_name() -> None:
    hdrs = headers(prefix="svix")
    del hdrs["svix-signature"]
    assert refused(BODY, hdrs) == "missing svix-signature header"


@pytest.mark.parametrize(
    "ts",
    ["abc", "1.7e9", "1700000000.0", "-1700000000", "+1700000000", "0x65", "1 700 000 000",
     "\uff11\uff17" + "\uff10" * 8, "1700000000²", "170000000000000", "1_700_000_000"],
)  # fmt: skip
def test_non_integer_timestamp(ts: str) -> None:
    msg = refused(BODY, headers(ts=ts, sig=sign(SECRET_A, MSG_ID, TS, BODY)))
    assert msg == "timestamp header is not an integer of unix seconds"


@pytest.mark.parametrize(
    "sig",
    ["garbage", "v1", "v1a", "v2,abc", "V1,abc", ",,,", "v1 , abc", "v1=abc", "sha256=deadbeef"],
)
def test_signature_header_without_v1_entry(sig: str) -> None:
    assert refused(BODY, headers(sig=sig)) == "no v1 or v1a signature in the signature header"


@pytest.mark.parametrize(
    "sig",
    ["v1,", "v1,not base64 at all", "v1,é", "v1,\u00e9\u00e9\u00e9=", "v1,AAAA",
     "v1,====", "v1,,", "v1," + "A" * 10_000],
)  # fmt: skip
def test_malformed_v1_entries(sig: str) -> None:
    assert refused(BODY, headers(sig=sig)) == "no matching signature"


def test_truncated_or_padded_signature() -> None:
    good = sign(SECRET_A, MSG_ID, TS, BODY)
    raw = base64.b64decode(good[3:])
    for variant in (raw[:-1], raw + b"\0", raw[:16]):
        bad = "v1," + base64.b64encode(variant).decode()
        assert refused(BODY, headers(sig=bad)) == "no matching signature"
    # The unpadded form of a valid signature is not valid base64.
    assert refused(BODY, headers(sig=good.rstrip("="))) == "no matching signature"


def test_other_versions_are_skipped_not_fatal() -> None:
    good = sign(SECRET_A, MSG_ID, TS, BODY)
    for header in (f"v2,{good[3:]} {good}", f"v1a,AAAA {good}", f"v1,AAAA   {good}",
                   f"{good} v1,AAAA", f"garbage {good}", f"\t{good}\t"):  # fmt: skip
        assert verify_request(BODY, headers(sig=header), SECRET_A, now=TS) == MSG_ID
    assert refused(BODY, headers(sig="v2," + good[3:])).startswith("no v1 or v1a signature")


def test_id_that_cannot_be_utf8() -> None:
    hdrs = headers(sig="v1,AAAA")
    hdrs["webhook-id"] = "evt_\ud800"
    assert refused(BODY, hdrs) == "webhook id is not valid text"


def test_non_text_header_value() -> None:
    hdrs: dict[str, object] = {**headers(), "webhook-signature": b"v1,AAAA"}
    assert refused(BODY, hdrs) == "malformed webhook-signature header"  # type: ignore[arg-type]


# --------------------------------------------------------------------------
# Several secrets, several signatures (rotation)
# --------------------------------------------------------------------------


def test_several_secrets_any_may_match() -> None:
    hdrs = headers(sig=sign(SECRET_B, MSG_ID, TS, BODY))
    assert verify_request(BODY, hdrs, [SECRET_A, SECRET_B], now=TS) == MSG_ID
    assert verify_request(BODY, hdrs, (SECRET_C, SECRET_B, SECRET_A), now=TS) == MSG_ID
    assert refused(BODY, hdrs, [SECRET_A, SECRET_C]) == "no matching signature"


def test_several_signatures_during_rotation() -> None:
    # dispatcher signs with the new secret and the rotated-out one.
    header = Signer((SECRET_B, SECRET_A)).signature(MSG_ID, TS, BODY)
    assert len(header.split(" ")) == 2
    hdrs = headers(sig=header)
    for secrets in ([SECRET_A], [SECRET_B], [SECRET_A, SECRET_B], [SECRET_C, SECRET_A]):
        assert verify_request(BODY, hdrs, secrets, now=TS) == MSG_ID
    assert refused(BODY, hdrs, SECRET_C) == "no matching signature"
    three = Signer((SECRET_A, SECRET_B, SECRET_C)).signature(MSG_ID, TS, BODY)
    for secret in (SECRET_A, SECRET_B, SECRET_C):
        assert verify_request(BODY, headers(sig=three), secret, now=TS) == MSG_ID


def test_prefixless_secret_is_the_same_key() -> None:
    assert verify_request(BODY, headers(), SECRET_A[len("whsec_") :], now=TS) == MSG_ID


# --------------------------------------------------------------------------
# Configuration mistakes fail loudly, not as 401s
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "secrets",
    [[], (), "", "whsec_", "whsec_!!!", "whsec_abc", "whpk_" + "A" * 44,
     [SECRET_A, "whsec_nope"], "whsec_" + base64.b64encode(b"k" * 15).decode()],
)  # fmt: skip
def test_bad_secrets_raise_value_error(secrets: str | list[str]) -> None:
    with pytest.raises(ValueError) as info:
        Verifier(secrets)
    assert not isinstance(info.value, VerificationError)
    for s in [secrets] if isinstance(secrets, str) else secrets:
        if len(s) > 6:
            assert s not in str(info.value)
    with pytest.raises(ValueError):
        verify(BODY, headers(), secrets, now=TS)
    with pytest.raises(ValueError):
        webhook_middleware(secrets)


def test_bad_tolerance_raises_value_error() -> None:
    with pytest.raises(ValueError):
        Verifier(SECRET_A, -1)
    with pytest.raises(ValueError):
        Verifier(SECRET_A, "300")  # type: ignore[arg-type]


def test_body_must_be_bytes() -> None:
    with pytest.raises(TypeError):
        verify(BODY.decode(), headers(), SECRET_A, now=TS)  # type: ignore[arg-type]
    assert verify_request(bytearray(BODY), headers(), SECRET_A, now=TS) == MSG_ID


def test_middleware_paths_must_be_a_collection() -> None:
    with pytest.raises(TypeError):
        webhook_middleware(SECRET_A, paths="/hooks")


@pytest.mark.parametrize(
    "table",
    ["", "1abc", "a-b", "a b", "x; DROP TABLE y", 'x"', "a.b.c", "ä", "a" * 64, "t\n",
     "dispatcher_received;", "public.", ".x"],
)  # fmt: skip
async def test_table_name_must_be_a_plain_identifier(table: str) -> None:
    class NoDatabase:
        """Any use of the connection would fail the test."""

        def __getattr__(self, name: str) -> object:
            raise AssertionError(f"touched the connection: {name}")

    with pytest.raises(ValueError, match="plain SQL identifier"):
        await claim_once(NoDatabase(), "evt", table=table)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="plain SQL identifier"):
        await ensure_idempotency_table(NoDatabase(), table)  # type: ignore[arg-type]


# --------------------------------------------------------------------------
# Properties
# --------------------------------------------------------------------------

keys = st.binary(min_size=16, max_size=64)
ids = st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=40).filter(
    lambda s: s.strip(" \t") == s
)
header_names = st.sampled_from(
    ["webhook-id", "webhook-timestamp", "webhook-signature", "svix-id", "svix-timestamp",
     "svix-signature", "Webhook-Id", "WEBHOOK-SIGNATURE", "content-type", "x-other"]
)  # fmt: skip
sig_like = st.lists(
    st.one_of(
        st.just("v1,"),
        st.just("v1a,"),
        st.sampled_from(["v1", "v2", ",", " ", "=", "é"]),
        st.text(string.ascii_letters + string.digits + "+/=", max_size=48),
    ),
    max_size=6,
).map("".join)
header_values = st.one_of(
    st.text(max_size=60),  # any text, lone surrogates included
    st.integers(min_value=-(10**15), max_value=10**15).map(str),
    sig_like,
    st.binary(max_size=8),  # not even text
)


def _secret(key: bytes) -> str:
    return "whsec_" + base64.b64encode(key).decode()


@PROPS
@given(
    st.dictionaries(header_names, header_values, max_size=8),
    st.binary(max_size=64),
    st.floats(min_value=0, max_value=2e10, allow_nan=False),
)
def test_fuzzed_headers_only_ever_raise_verification_error(
    hdrs: dict[str, object], body: bytes, now: float
) -> None:
    try:
        verify(body, hdrs, [SECRET_A, SECRET_B], now=now)  # type: ignore[arg-type]
    except VerificationError as exc:
        assert str(exc) and SECRET_A not in str(exc)
    else:  # pragma: no cover - a forged signature would be a finding
        pytest.fail("random headers verified")


@PROPS
@given(st.data())
def test_fuzzed_mutations_of_a_valid_request(data: st.DataObject) -> None:
    """Starting from a valid request, any change to one header value is refused
    (or, if it left the signed content intact, still accepted): never a crash."""
    good = headers(sig=Signer((SECRET_A, SECRET_B)).signature(MSG_ID, TS, BODY))
    name = data.draw(st.sampled_from(sorted(good)))
    value = data.draw(st.one_of(header_values, sig_like.map(lambda s: good[name] + s)))
    hdrs = {**good, name: value}
    try:
        got = verify_request(BODY, hdrs, SECRET_A, now=TS)  # type: ignore[arg-type]
    except VerificationError:
        return
    # Accepted only when what was signed is unchanged.
    assert got == MSG_ID
    assert isinstance(value, str)
    if name == "webhook-timestamp":
        assert int(value.strip(" \t")) == TS


@PROPS
@given(st.lists(keys, min_size=1, max_size=3, unique=True), ids,
       st.integers(min_value=0, max_value=2**33), st.binary(max_size=200),
       st.integers(min_value=-300, max_value=300))  # fmt: skip
def test_every_signer_output_verifies(
    key_list: list[bytes], msg_id: str, ts: int, body: bytes, skew: int
) -> None:
    secrets = [_secret(k) for k in key_list]
    hdrs = headers(msg_id, ts, Signer(tuple(secrets)).signature(msg_id, ts, body))
    for secret in secrets:
        assert verify_request(body, hdrs, secret, now=ts + skew) == msg_id
    with pytest.raises(VerificationError):
        verify(body + b"x", hdrs, secrets, now=ts)


@PROPS
@given(keys, ids.filter(str.isascii), st.text(max_size=100),
       st.integers(min_value=-290, max_value=290))  # fmt: skip
def test_agrees_with_standardwebhooks(key: bytes, msg_id: str, text: str, skew: int) -> None:
    secret = _secret(key)
    now = int(time.time())
    ts = now + skew
    sig = Webhook(secret).sign(msg_id, datetime.fromtimestamp(ts, tz=UTC), text)
    hdrs = headers(msg_id, ts, sig)
    body = text.encode()
    assert verify_request(body, hdrs, secret, now=now) == msg_id
    Webhook(secret).verify(body, hdrs, json_parse=False)  # the reference agrees
    other = _secret(bytes(b ^ 1 for b in key))
    with pytest.raises(VerificationError):
        verify(body, hdrs, other, now=now)


def test_v1a_public_keys_verify_ed25519_signatures() -> None:
    from dispatcher.core.signing import Signer, generate_signing_key, public_key

    sk = generate_signing_key()
    now = 1_800_000_000
    body = b'{"a": 1}'
    header = Signer((sk,)).signature("msg_v1a", now, body)
    headers = {"webhook-id": "msg_v1a", "webhook-timestamp": str(now), "webhook-signature": header}
    assert verify(body, headers, public_key(sk), now=now) is None
    with pytest.raises(VerificationError):
        verify(body + b" ", headers, public_key(sk), now=now)
    with pytest.raises(VerificationError):
        verify(body, headers, public_key(generate_signing_key()), now=now)


@given(st.text(max_size=40), st.text(max_size=80))
def test_verifier_only_refuses_hostile_headers(msg_id: str, header: str) -> None:
    from dispatcher.core.signing import generate_secret

    headers = {"webhook-id": msg_id, "webhook-timestamp": "1", "webhook-signature": header}
    try:
        Verifier(generate_secret()).verify(b"x", headers, now=1)
    except VerificationError:
        pass  # the only way it may say no
