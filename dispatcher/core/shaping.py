"""The shape of a request: URL macros, form bodies, success-body checks.

Pure: a template and a payload in, the URL and body bytes out. Affiliate
postback URLs carry macros filled from the event's payload (`a.b` for nested
objects) or from the built-ins. Three spellings (`macro_style`): `{name}`
(brace, the default), `#name#` (hash, CAKE's) and `{{name}}` (double, CRM
tools'). Modifiers: `|default:VALUE` (used when the field is missing) and
`|raw` (inserted without percent-encoding, only in the query string); a
value map (`value_map`) turns a field's value into the partner's code.

Every other value is percent-encoded whole (all but `A-Za-z0-9-._~`, a space
as `%20`), so a value can add neither a path segment, a query parameter, nor
a host: macros may stand only in the path and the query, and the authority
is fixed text. A raw value stands only after `?`, where it can at most add
query parameters, which is what a partner that pre-encodes wants.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import quote

import orjson
import re2

from dispatcher.core.errors import BadInput

BUILTINS = frozenset({"event_id", "event_type", "attempt", "timestamp",
                      "postback_id", "rand", "unix_time_ms"})  # fmt: skip
SUCCESS_BODY_BYTES = 4096  # how much of a 2xx body --success-body is matched against
MAX_MACROS = 64
MAX_DEFAULT = 200
MAX_MAP_TEXT = 10_000
_NAME = re.compile(r"[A-Za-z0-9_.]+")
# macro_style: (opener, closer)
STYLES: dict[str, tuple[str, str]] = {"brace": ("{", "}"), "hash": ("#", "#"),
                                      "double": ("{{", "}}")}  # fmt: skip
# What a raw value may carry as it is: RFC 3986's unreserved and reserved
# characters and `%` (a partner's own encoding). A space, a control
# character, `#` or non-ASCII is still encoded: raw must never split the
# request line or cut the query into a fragment.
_RAW_SAFE = "-._~!$&'()*+,;=:@/?%"


class Unshapeable(Exception):
    """A payload this endpoint's template cannot be filled from: the
    delivery is dead-lettered at once and nothing is sent. The message is
    the stored last_error (a fixed class and the macro's name, never a value)."""


class MissingMacro(Unshapeable):
    """The payload has no value for a macro (and the macro has no default)."""

    def __init__(self, name: str) -> None:
        super().__init__(f"missing macro: {name}")
        self.name = name


class UnmappedValue(Unshapeable):
    """A macro's value has no entry in the endpoint's value map, and no `*`."""

    def __init__(self, name: str) -> None:
        super().__init__(f"unmapped value: {name}")
        self.name = name


@dataclass(frozen=True, slots=True)
class Macro:
    name: str
    default: str | None = None  # |default:VALUE, as written (encoded unless raw)
    raw: bool = False  # |raw


ValueMap = Mapping[str, Mapping[str, str]]


@dataclass(frozen=True, slots=True)
class Template:
    """A URL split into literal text and macros, alternating:
    `parts[0]`, macro 0, `parts[1]`, macro 1, … , `parts[-1]`."""

    parts: tuple[str, ...]
    macros: tuple[Macro, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(m.name for m in self.macros)

    @property
    def has_macros(self) -> bool:
        return bool(self.macros)

    def sample(self) -> str:
        """The URL with every macro replaced by a plain value: what the URL
        checks (shape, SSRF guard) judge at `endpoint add`."""
        return self._join(["x"] * len(self.macros))

    def _join(self, values: list[str]) -> str:
        out = [self.parts[0]]
        for value, literal in zip(values, self.parts[1:], strict=True):
            out += (value, literal)
        return "".join(out)

    def check(self, payload: Any, value_map: ValueMap | None = None) -> None:
        """Unshapeable when some macro cannot be filled from this payload,
        whatever the attempt: what the worker asks before spending one."""
        for m in self.macros:
            if m.name not in BUILTINS:
                value(m, payload, _NO_BUILTINS, value_map)

    def render(
        self, payload: Any, builtins: Mapping[str, str], value_map: ValueMap | None = None
    ) -> str:
        """The URL for one attempt; Unshapeable when the payload lacks a
        value (an absent field, a path through a non-object) or a value map
        has no entry for it."""
        if not self.macros:
            return self.parts[0]
        return self._join([
            (encode_raw if m.raw else encode)(value(m, payload, builtins, value_map))
            for m in self.macros
        ])  # fmt: skip


_NO_BUILTINS: Mapping[str, str] = {}


def value(m: Macro, payload: Any, builtins: Mapping[str, str], value_map: ValueMap | None) -> str:
    """A macro's text before encoding: the built-in or the field, mapped;
    the default (as written, never mapped) when the field is missing."""
    try:
        text = lookup(payload, m.name, builtins)
    except MissingMacro:
        if m.default is None:
            raise
        return m.default
    if value_map is not None:
        codes = value_map.get(m.name)
        if codes is not None:
            mapped = codes.get(text, codes.get("*"))
            if mapped is None:
                raise UnmappedValue(m.name)
            return mapped
    return text


def postback_id(endpoint_id: int, event_id: str) -> str:
    """`{postback_id}`: the same for every attempt of one delivery (one
    event to one endpoint), different for every other, so a partner can
    ignore a retry it already counted. 32 hex digits (128 bits of SHA-256):
    no encoding needed, and it reveals neither id."""
    return hashlib.sha256(f"{endpoint_id}:{event_id}".encode()).hexdigest()[:32]


def _authority_end(url: str, delimiters: str) -> int:
    """Where the path starts: after `scheme://host:port`."""
    start = url.find("://")
    start = 0 if start < 0 else start + 3
    ends = [i for i in (url.find(c, start) for c in delimiters) if i >= 0]
    return min(ends) if ends else len(url)


def _parse_macro(body: str, query_at: int, at: int) -> Macro:
    """`name`, `name|raw`, `name|default:VALUE` (modifiers may combine)."""
    name, *mods = body.split("|")
    if not _NAME.fullmatch(name) or name.startswith(".") or name.endswith(".") or ".." in name:
        shown = name if len(name) <= 40 else name[:40] + "…"
        raise BadInput(f"url macro {shown!r}: a name is letters, digits, '_' and '.'")
    default: str | None = None
    raw = False
    for mod in mods:
        if mod == "raw" and not raw:
            if query_at < 0 or at < query_at:
                raise BadInput(f"url macro {name}|raw: a raw value may stand only in the query")
            raw = True
        elif mod.startswith("default:") and default is None:
            default = mod[len("default:") :]
            if len(default) > MAX_DEFAULT or not default.isprintable():
                raise BadInput(
                    f"url macro {name}: a default is at most {MAX_DEFAULT} printable characters"
                )
        else:
            raise BadInput(f"url macro {name}: unknown modifier {mod[:40]!r} (default:VALUE, raw)")
    return Macro(name, default, raw)


def parse_template(url: str, style: str = "brace") -> Template:
    """Splits a URL into literal text and macros, or BadInput: unbalanced
    delimiters, names outside `[A-Za-z0-9_.]`, an unknown modifier, a
    macro in the scheme, host or port, or `|raw` outside the query."""
    if style not in STYLES:
        raise BadInput(f"macro_style must be one of {', '.join(STYLES)}")
    opener, closer = STYLES[style]
    # In hash style `#` opens a macro, so it cannot end the authority (and
    # the URL has no fragment: a fragment is never sent anyway).
    authority = _authority_end(url, "/?" if style == "hash" else "/?#")
    marks = set(opener + closer)
    if marks & set(url[:authority]):
        raise BadInput(
            "url macros may stand only in the path or query, not the scheme, host or port"
        )
    query_at = url.find("?", authority)
    fragment_at = -1 if style == "hash" else url.find("#", authority)
    if fragment_at >= 0 and (query_at < 0 or fragment_at < query_at):
        query_at = -1  # a `?` in the fragment starts no query
    parts: list[str] = []
    macros: list[Macro] = []
    literal_start = 0
    i = authority
    while i < len(url):
        if url.startswith(opener, i):
            close = url.find(closer, i + len(opener))
            if close < 0:
                raise BadInput(f"url has an unbalanced {opener!r} at position {i}")
            in_query = query_at >= 0 and (fragment_at < 0 or i < fragment_at)
            macro = _parse_macro(url[i + len(opener) : close], query_at if in_query else -1, i)
            parts.append(url[literal_start:i])
            macros.append(macro)
            literal_start = i = close + len(closer)
            continue
        if url[i] in marks and style != "hash":
            raise BadInput(f"url has an unbalanced {url[i]!r} at position {i}")
        i += 1
    if len(macros) > MAX_MACROS:
        raise BadInput(f"url has more than {MAX_MACROS} macros")
    parts.append(url[literal_start:])
    return Template(parts=tuple(parts), macros=tuple(macros))


def url_sample(url: str, style: str = "brace") -> str:
    """What the URL checks (shape, SSRF guard) judge: the URL with each
    macro as a plain value, after the template itself is checked."""
    if not isinstance(url, str):
        raise BadInput("url must be a string")
    return parse_template(url, style).sample()


def parse_value_map(value: Any) -> str | None:
    """`value_map` as canonical JSON text: an object of macro names, each
    an object of value → code (strings; numbers and booleans are taken as
    the text a macro would show). `*` in an inner object catches the rest."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = orjson.loads(value)
        except orjson.JSONDecodeError:
            raise BadInput("value_map must be a JSON object") from None
    if not isinstance(value, dict):
        raise BadInput("value_map must be a JSON object of macro name: {value: code}")
    out: dict[str, dict[str, str]] = {}
    for name, codes in value.items():
        if not _NAME.fullmatch(name):
            raise BadInput(f"value_map: {name[:40]!r} is not a macro name")
        if not isinstance(codes, dict) or not codes:
            raise BadInput(f"value_map.{name} must be a non-empty object of value: code")
        out[name] = {}
        for key, code in codes.items():
            if isinstance(code, dict | list) or code is None:
                raise BadInput(f"value_map.{name}.{key[:40]}: a code is a string or a number")
            out[name][key] = scalar_text(code)
    text = orjson.dumps(out).decode()
    if len(text) > MAX_MAP_TEXT:
        raise BadInput(f"value_map must be at most {MAX_MAP_TEXT} characters of JSON")
    return text


def load_value_map(text: str | None) -> dict[str, dict[str, str]] | None:
    """The stored value_map (parse_value_map's text) as data."""
    if text is None:
        return None
    doc = orjson.loads(text)
    return {str(k): {str(a): scalar_text(b) for a, b in v.items()} for k, v in doc.items()}


def lookup(payload: Any, name: str, builtins: Mapping[str, str]) -> str:
    """A macro's text: a built-in, or the payload field at the dotted path."""
    if name in BUILTINS and name in builtins:
        return builtins[name]
    value = payload
    for key in name.split("."):
        if not isinstance(value, dict) or key not in value:
            raise MissingMacro(name)
        value = value[key]
    return scalar_text(value)


def scalar_text(value: Any) -> str:
    """A JSON value as text: strings as they are, numbers as JSON writes
    them, booleans `true`/`false`, null empty, objects and arrays as JSON."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)  # every digit, past 64 bits too
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        # 1e2 or 100.0 in the payload: JSON (JavaScript's writer) says 100.
        return str(int(value))
    try:
        return orjson.dumps(value).decode()
    except TypeError:  # an object or array holding an integer past 64 bits
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def encode(text: str) -> str:
    """Percent-encoding of everything but the unreserved characters; a
    value that is exactly `.` or `..` has its dots encoded too, so it is
    never a dot segment (`/m/{x}/y` with x = `..` must not climb a level)."""
    if text in (".", ".."):
        return "%2E" * len(text)
    return quote(text, safe="", encoding="utf-8", errors="strict")


def encode_raw(text: str) -> str:
    """`|raw`: the value as the partner pre-encoded it, except what would
    break the request (see _RAW_SAFE)."""
    return quote(text, safe=_RAW_SAFE, encoding="utf-8", errors="strict")


def form_body(payload: Any) -> bytes:
    """The payload's top-level scalar fields as
    application/x-www-form-urlencoded (nested objects and arrays are left
    out: a form has no place for them)."""
    if not isinstance(payload, dict):
        return b""
    pairs = [
        f"{encode(str(key))}={encode(scalar_text(value))}"
        for key, value in payload.items()
        if not isinstance(value, dict | list)
    ]
    return "&".join(pairs).encode()


class Matcher(Protocol):
    def search(self, text: str) -> object | None: ...


_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # RE2 would print to stderr from C++: we say it in one line
_RE2_OPTIONS.max_mem = 8 << 20  # a pattern's compiled size, bounded per endpoint


def compile_success_body(pattern: str | None) -> Matcher | None:
    """--success-body, checked at `endpoint add`: an RE2 pattern. RE2 runs
    in time linear in the text (no backtracking), so no pattern a tenant
    writes can hold the event loop: `(a+)+$` against `aaaa…a!` is as quick
    as any other. Backreferences and lookaround, which need backtracking,
    do not compile and are refused."""
    if pattern is None:
        return None
    if not isinstance(pattern, str) or not pattern or len(pattern) > 1000:
        raise BadInput("success_body must be a regular expression of 1 to 1000 characters")
    try:
        matcher: Matcher = re2.compile(pattern, _RE2_OPTIONS)
    except re2.error as exc:
        why = exc.args[0].decode(errors="replace") if exc.args and isinstance(
            exc.args[0], bytes) else str(exc)  # fmt: skip
        raise BadInput(
            f"success_body is not an RE2 pattern (linear-time syntax, no lookaround or "
            f"backreferences): {why[:120]}"
        ) from None
    return matcher


def body_matches(pattern: Matcher, body: bytes) -> bool:
    return pattern.search(body[:SUCCESS_BODY_BYTES].decode("utf-8", "replace")) is not None
