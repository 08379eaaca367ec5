"""The shape of a request: URL macros, form bodies, success-body checks.

Pure: a template and a payload in, the URL and body bytes out. Affiliate
postback URLs carry `{name}` macros filled from the event's payload
(`{a.b}` for nested objects) or from the built-ins `{event_id}`,
`{event_type}`, `{attempt}` and `{timestamp}`. Every value is
percent-encoded whole (all but `A-Za-z0-9-._~`, a space as `%20`), so a
value can add neither a path segment, a query parameter, nor a host: macros
may stand only in the path and the query, and the authority is fixed text.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import quote

import orjson
import re2

from dispatcher.core.errors import BadInput

BUILTINS = frozenset({"event_id", "event_type", "attempt", "timestamp"})
SUCCESS_BODY_BYTES = 4096  # how much of a 2xx body --success-body is matched against
MAX_MACROS = 64
_NAME = re.compile(r"[A-Za-z0-9_.]+")


class MissingMacro(Exception):
    """The payload has no value for a macro: the delivery cannot be sent."""

    def __init__(self, name: str) -> None:
        super().__init__(f"missing macro: {name}")
        self.name = name


@dataclass(frozen=True, slots=True)
class Template:
    """A URL split into literal text and macro names, alternating:
    `parts[0]`, name 0, `parts[1]`, name 1, … , `parts[-1]`."""

    parts: tuple[str, ...]
    names: tuple[str, ...]

    @property
    def has_macros(self) -> bool:
        return bool(self.names)

    def sample(self) -> str:
        """The URL with every macro replaced by a plain value: what the URL
        checks (shape, SSRF guard) judge at `endpoint add`."""
        return self._join(["x"] * len(self.names))

    def _join(self, values: list[str]) -> str:
        out = [self.parts[0]]
        for value, literal in zip(values, self.parts[1:], strict=True):
            out += (value, literal)
        return "".join(out)

    def render(self, payload: Any, builtins: Mapping[str, str]) -> str:
        """The URL for one attempt; MissingMacro when the payload lacks a
        value (an absent field, or a path through a non-object)."""
        if not self.names:
            return self.parts[0]
        return self._join([encode(lookup(payload, name, builtins)) for name in self.names])


def _authority_end(url: str) -> int:
    """Where the path starts: after `scheme://host:port`."""
    start = url.find("://")
    start = 0 if start < 0 else start + 3
    ends = [i for i in (url.find(c, start) for c in "/?#") if i >= 0]
    return min(ends) if ends else len(url)


def parse_template(url: str) -> Template:
    """Splits a URL into literal text and macros, or BadInput: unbalanced
    braces, names outside `[A-Za-z0-9_.]`, or a macro in the scheme, host
    or port."""
    authority = _authority_end(url)
    if "{" in url[:authority] or "}" in url[:authority]:
        raise BadInput(
            "url macros may stand only in the path or query, not the scheme, host or port"
        )
    parts: list[str] = []
    names: list[str] = []
    literal_start = 0
    i = authority
    while i < len(url):
        c = url[i]
        if c == "}":
            raise BadInput(f"url has an unbalanced '}}' at position {i}")
        if c != "{":
            i += 1
            continue
        close = url.find("}", i + 1)
        if close < 0:
            raise BadInput(f"url has an unbalanced '{{' at position {i}")
        name = url[i + 1 : close]
        if not _NAME.fullmatch(name) or name.startswith(".") or name.endswith(".") or ".." in name:
            shown = name if len(name) <= 40 else name[:40] + "…"
            raise BadInput(f"url macro {{{shown}}}: a name is letters, digits, '_' and '.'")
        parts.append(url[literal_start:i])
        names.append(name)
        literal_start = i = close + 1
    if len(names) > MAX_MACROS:
        raise BadInput(f"url has more than {MAX_MACROS} macros")
    parts.append(url[literal_start:])
    return Template(parts=tuple(parts), names=tuple(names))


def url_sample(url: str) -> str:
    """What the URL checks (shape, SSRF guard) judge: the URL with each
    macro as a plain value, after the template itself is checked."""
    if not isinstance(url, str):
        raise BadInput("url must be a string")
    return parse_template(url).sample()


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
    return orjson.dumps(value).decode()


def encode(text: str) -> str:
    """Percent-encoding of everything but the unreserved characters; a
    value that is exactly `.` or `..` has its dots encoded too, so it is
    never a dot segment (`/m/{x}/y` with x = `..` must not climb a level)."""
    if text in (".", ".."):
        return "%2E" * len(text)
    return quote(text, safe="", encoding="utf-8", errors="strict")


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
