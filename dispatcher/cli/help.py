"""The words of `dispatcher --help` that are not next to a single flag: the
overview printed under the command list, and endpoint add's settings with
their defaults (EndpointSettings' own, read from it; argparse sets none, so
an unset flag keeps them)."""

from __future__ import annotations

from dispatcher.core.models import EndpointSettings

OVERVIEW = """\
start here:  dispatcher migrate; dispatcher endpoint add --url URL; dispatcher enqueue …;
             dispatcher run (the worker).  `dispatcher COMMAND --help` for a command's flags.
database:    DATABASE_URL, or unset for an embedded PostgreSQL in $DISPATCHER_HOME/pgdata
             (see `dispatcher db`).  Errors: one line on stderr, exit 2 bad input, 1 failure."""

_D = EndpointSettings()

# endpoint add's settings: (flag, type, help). No defaults in argparse: an
# unset setting takes EndpointSettings' default, shown here from there.
ENDPOINT_FLAGS = (
    ("--rate-per-s", float, "token-bucket rate, requests/s (default: unlimited)"),
    ("--burst", int, "token-bucket size (default: one second of the rate, at least 1)"),
    ("--max-in-flight", int,
     f"concurrent requests to it, all workers together (default: {_D.max_in_flight})"),
    ("--timeout-ms", int, f"per attempt (default: {_D.timeout_ms})"),
    ("--max-attempts", int, f"then dead_letter (default: {_D.max_attempts})"),
    ("--retry-base-ms", int, f"backoff base, full jitter (default: {_D.retry_base_ms})"),
    ("--retry-cap-ms", int, f"backoff cap (default: {_D.retry_cap_ms})"),
    ("--failure-threshold", int,
     f"consecutive failures that open the breaker (default: {_D.failure_threshold})"),
    ("--cooldown-s", float, f"how long the breaker stays open (default: {_D.cooldown_s:g})"),
)  # fmt: skip

# endpoint add's request shape, filter, ordering and mTLS: (flag, choices, help).
SHAPING_FLAGS = (
    ("--method", ("POST", "GET", "PUT"), "HTTP method (default: POST)"),
    ("--body", ("json", "form", "none"),
     "json: the payload bytes; form: its top-level fields, urlencoded; none: no body "
     "(default: json, none for GET)"),
    ("--success-body", None,
     "regex a 2xx body (first 4 KiB) must match, else the attempt failed (postbacks)"),
    ("--filter", None,
     "JSON object: only events whose payload contains it (jsonb @>), decided at enqueue"),
    ("--ordering", ("none", "fifo"),
     "fifo: one delivery at a time per --ordering-key value, in enqueue order (default: none)"),
    ("--ordering-key", None, "payload field (a.b nested) whose value is a FIFO lane"),
    ("--client-cert", None, "PEM file: TLS client certificate (mTLS), with --client-key"),
    ("--client-key", None, "PEM file: its private key (encrypted at rest with the secret key)"),
)  # fmt: skip
