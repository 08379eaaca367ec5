"""An endpoint's wire: what every request to it is built from, and each request.

`EndpointWire` is made once per endpoint version (Sender.wire, with the
TLS context; gate.Gates keeps it until what it is built from changes): the
parsed URL or its macro template, the fixed headers, the signer, the body
mode, the success_body pattern, the SSRF verdict on a literal address. Per
attempt it gives the URL and the bytes to send (`request`) and the signed
headers (`headers_for`); sending them and reading the answer is sender.py's.
"""

from __future__ import annotations

import json
import os
import random
import ssl
import tempfile
from pathlib import Path
from typing import Any

from multidict import CIMultiDict
from yarl import URL

from dispatcher.core.destinations import BROKER_KINDS, HTTP, POLL, kind_of, parse_broker
from dispatcher.core.models import Delivery
from dispatcher.core.shaping import (
    Unshapeable,
    compile_success_body,
    form_body,
    load_value_map,
    parse_template,
    postback_id,
)
from dispatcher.core.signing import Signer
from dispatcher.core.ssrf import target_refusal
from dispatcher.version import __version__

USER_AGENT = f"dispatcher/{__version__}"

CONTENT_TYPES = {"json": "application/json", "form": "application/x-www-form-urlencoded"}


class EndpointWire:
    """Per-endpoint wire settings, built once per endpoint version."""

    __slots__ = ("app", "body_mode", "broker", "broker_fixed", "extras", "headers", "method",
                 "polled", "shaped", "signer",
                 "ssl", "success", "target", "template", "timeout_ms", "timeout_s", "url",
                 "url_refusal", "url_shown", "value_map")  # fmt: skip

    def __init__(
        self,
        url: str,
        secrets: tuple[str, ...],
        timeout_ms: int,
        *,
        allow_private: bool,
        allowed_networks: tuple[str, ...] = (),
        headers: tuple[tuple[str, str], ...] = (),
        method: str = "POST",
        body_mode: str = "json",
        success_body: str | None = None,
        ssl_context: ssl.SSLContext | bool = True,
        macro_style: str = "brace",
        value_map: str | None = None,
        app: str = "default",
    ):
        self.url = url
        self.app = app  # the endpoint's application (a span's attribute)
        # A broker destination (core.destinations): published to by
        # worker/brokers, not sent over HTTP. Its URL has no macros.
        kind = kind_of(url)
        self.broker = parse_broker(url) if kind in BROKER_KINDS else None
        # A polling endpoint's rows are never claimed (Gate.budget): they
        # wait for its consumer (ops.polling).
        self.polled = kind == POLL
        template = parse_template(url if kind == HTTP else "http://broker/", macro_style)
        self.template = template if template.has_macros else None
        self.value_map = load_value_map(value_map)
        # The built-ins that cost something per attempt, computed only when
        # the template uses them.
        self.extras = frozenset(template.names) & {"postback_id", "rand", "unix_time_ms"}
        # Parsed once, not per request; a template's host is fixed text.
        self.target = URL(template.sample() if self.template else url)
        if self.broker is not None:  # what a span shows: never the credentials
            self.target = self.target.with_user(None)
        # A span's url.full: never the query (a postback's macro values) nor
        # credentials.
        # (A polling endpoint's `poll:` is no absolute URL: shown as it is.)
        self.url_shown = (
            str(self.target.with_query(None).with_user(None).with_fragment(None))
            if self.target.absolute
            else url
        )
        self.method = method
        self.body_mode = body_mode
        # Only a template or a body built from the payload reads the payload.
        self.shaped = self.template is not None or body_mode == "form"
        self.success = compile_success_body(success_body)
        self.ssl = ssl_context
        # The fixed part of every request's headers, copied per request (a C
        # copy) instead of rebuilt from a dict.
        self.headers: CIMultiDict[str] = CIMultiDict(headers)
        if body_mode in CONTENT_TYPES:
            self.headers["content-type"] = CONTENT_TYPES[body_mode]
        self.headers["user-agent"] = USER_AGENT
        # A broker message's fixed properties: the same headers, names
        # lower-case, without User-Agent, and the event's JSON whatever the
        # endpoint's body shape (a form or no body shapes HTTP requests only):
        # every broker message says so (SPEC "Destinations").
        self.broker_fixed: dict[str, str] = {}
        if self.broker is not None:
            self.broker_fixed = {k.lower(): v for k, v in self.headers.items()
                                 if k.lower() != "user-agent"}  # fmt: skip
            self.broker_fixed["content-type"] = "application/json"
        self.signer = Signer(secrets)
        self.timeout_ms = timeout_ms
        self.timeout_s = timeout_ms / 1000
        # Decided once per endpoint version, not per request: aiohttp skips
        # the resolver for IP literals, and refuses non-canonical IPv4 forms
        # itself only as a retryable error; both are a permanent refusal here.
        # A broker's host is judged when its link connects (worker/brokers).
        self.url_refusal = None if kind != HTTP else target_refusal(
            self.target.raw_host or "",
            allow_private=allow_private,
            allowed_networks=allowed_networks,
        )  # fmt: skip

    def prepare(self, body: bytes) -> tuple[Any, str | None]:
        """The payload as data, for macros and form bodies (None when the
        wire sends the bytes as they are), or why it cannot be sent: the
        first macro it has no value for (`missing macro: name`)."""
        if not self.shaped:
            return None, None
        try:
            doc = load_payload(body)
            if self.template is not None:
                self.template.check(doc, self.value_map)
        except Unshapeable as exc:
            return None, str(exc)
        except ValueError as exc:
            return None, f"payload unreadable: {type(exc).__name__}"
        return doc, None

    def request(self, d: Delivery, now: float, body: bytes, doc: Any) -> tuple[URL, bytes]:
        """The URL and the bytes to send (and sign) for one attempt."""
        target = self.target
        if self.template is not None:
            builtins = {"event_id": d.event_id, "event_type": d.event_type,
                        "attempt": str(d.attempt_count + 1),
                        "timestamp": str(int(now))}  # fmt: skip
            if self.extras:
                builtins["postback_id"] = postback_id(d.endpoint_id, d.event_id)
                builtins["unix_time_ms"] = str(int(now * 1000))
                # Fresh per attempt (a partner's cache-buster), not a secret.
                builtins["rand"] = str(random.getrandbits(48))
            target = URL(self.template.render(doc, builtins, self.value_map), encoded=True)
        if self.body_mode == "json":
            return target, body
        if self.body_mode == "form":
            return target, form_body(doc)
        return target, b""

    def headers_for(self, event_id: str, ts: int, data: bytes) -> CIMultiDict[str]:
        """One attempt's headers: the fixed ones, the event's id and time,
        and the signature over the bytes actually sent (empty without a body)."""
        headers = self.headers.copy()
        headers["webhook-id"] = event_id
        headers["webhook-timestamp"] = str(ts)
        headers["webhook-signature"] = self.signer.signature(event_id, ts, data)
        return headers

    def broker_headers(self, event_id: str, ts: int, data: bytes) -> dict[str, str]:
        """headers_for's, as a broker message's properties (broker_fixed)."""
        headers = self.broker_fixed.copy()
        headers["webhook-id"] = event_id
        headers["webhook-timestamp"] = str(ts)
        headers["webhook-signature"] = self.signer.signature(event_id, ts, data)
        return headers


def load_payload(body: bytes) -> Any:
    """The payload as data, for a shaped request's macros and form body.
    The standard library's parser, not orjson: orjson reads an integer past
    64 bits as a float, and a long numeric click id would go out as
    1.2345678901234568e+29 (SPEC: numbers as JSON writes them)."""
    return json.loads(body)


def load_client_cert(ctx: ssl.SSLContext, cert_pem: str, key_pem: str) -> None:
    """Makes `ctx` present this endpoint's client certificate. The ssl
    module loads a chain only from files: written to a private temporary
    folder and removed at once."""
    with tempfile.TemporaryDirectory(prefix="dispatcher-mtls-") as folder:
        cert, key = Path(folder) / "cert.pem", Path(folder) / "key.pem"
        for path, pem in ((cert, cert_pem), (key, key_pem)):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(pem)
        ctx.load_cert_chain(cert, key)
