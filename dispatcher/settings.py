"""Runtime settings: every DISPATCHER_* variable is read here, but
DISPATCHER_DEBUG (tracebacks on errors, read by the CLI before settings
exist).

ENVIRONMENT lists each variable with its meaning and default, for people:
`python -m dispatcher.settings` (`make docs`) writes it out as
docs/operations/configuration.md, and a unit test fails when a name read
here is missing from it or the page is stale.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from dispatcher.core.dburl import check_database_url
from dispatcher.core.errors import BadInput
from dispatcher.core.retention import (  # noqa: F401 (re-exported)
    DAY_S,
    RETENTION_HELP,
    RETENTION_NAMES,
    RETENTION_VARIABLES,
    Retention,
)
from dispatcher.core.secretbox import SecretBox
from dispatcher.core.ssrf import TargetPolicy


def _float(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise BadInput(f"{name} must be a number, got {raw!r}") from None
    if value < 0:
        raise BadInput(f"{name} must not be negative")
    return value


# Fields of postback payloads that identify people or money (issue: privacy).
SENSITIVE_FIELDS = (
    "click_id",
    "conversion_id",
    "transaction_id",
    "payout",
    "amount",
    "email",
    "ip",
)


def _networks(raw: str) -> tuple[str, ...]:
    import ipaddress

    out = []
    for part in raw.replace(" ", ",").split(","):
        if not part:
            continue
        try:
            out.append(str(ipaddress.ip_network(part, strict=False)))
        except ValueError:
            raise BadInput(f"DISPATCHER_ALLOWED_NETWORKS: {part!r} is not a network") from None
    return tuple(out)


def _brokers(raw: str) -> frozenset[str]:
    """DISPATCHER_BROKERS_ALLOWED: `scheme://host:port`, comma-separated."""
    from dispatcher.core.destinations import broker_address

    try:
        return frozenset(broker_address(p) for p in raw.replace(" ", ",").split(",") if p)
    except BadInput as exc:
        raise BadInput(f"DISPATCHER_BROKERS_ALLOWED: {exc}") from None


def _names(raw: str | None, default: tuple[str, ...]) -> tuple[str, ...]:
    if raw is None:
        return default
    return tuple(n.strip().lower() for n in raw.split(",") if n.strip())


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    return int(_float(env, name, default))


def _fixed_window(env: Mapping[str, str]) -> int | None:
    """DISPATCHER_MAX_IN_FLIGHT fixes the window; unset or `auto` sizes it."""
    raw = env.get("DISPATCHER_MAX_IN_FLIGHT", "").strip().lower()
    if raw in ("", "auto"):
        return None
    return max(1, _int(env, "DISPATCHER_MAX_IN_FLIGHT", 0))


def default_home(env: Mapping[str, str]) -> Path:
    """DISPATCHER_HOME's default, the user's data folder (SPEC "Runtime
    environment"): one database per user whatever the working directory.
    XDG says a relative XDG_DATA_HOME is ignored."""
    xdg = env.get("XDG_DATA_HOME") or ""
    base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".local" / "share"
    return base / "dispatcher"


def _database_url(env: Mapping[str, str]) -> str | None:
    url = env.get("DATABASE_URL") or None
    if url is not None:
        check_database_url(url)  # before anything connects with it
    return url


def _log_format(env: Mapping[str, str]) -> str:
    raw = (env.get("DISPATCHER_LOG_FORMAT") or "auto").strip().lower()
    if raw not in ("auto", "json", "text"):
        raise BadInput(f"DISPATCHER_LOG_FORMAT must be auto, json or text, got {raw!r}")
    return raw


@dataclass(slots=True)
class OwnServer:
    """Where this process's admin API listens and the token it takes: what
    no endpoint may aim at or carry (SPEC "Limits"). Filled in by the server
    once it is bound (a port 0 is known only then), before any request."""

    origins: list[tuple[str, int]] = field(default_factory=list)
    token: str | None = None


def _retention(env: Mapping[str, str]) -> Retention:
    d = Retention()
    return Retention(**{
        name: _float(env, var, getattr(d, name)) for name, var in RETENTION_VARIABLES.items()
    })  # fmt: skip


@dataclass(frozen=True, kw_only=True, slots=True)
class Settings:
    database_url: str | None = None
    home: Path = field(default_factory=lambda: default_home(os.environ))
    allow_private_targets: bool = False
    admin_token: str | None = None
    allow_weak_admin_token: bool = False  # a token under 32 characters beyond loopback
    # The engine. max_in_flight None: the window is sized from what the
    # process can sustain (window.py); a number fixes it.
    max_in_flight: int | None = None
    batch_size: int = 500
    poll_interval_s: float = 1.0
    flush_interval_s: float = 0.02
    flush_size: int = 1000
    grace_s: float = 25.0
    # A lease is the endpoint's timeout plus this margin (SPEC: at most 60 s).
    lease_margin_s: float = 30.0
    endpoint_refresh_s: float = 1.0
    synchronous_commit: bool = False  # for the worker's claims and outcomes only
    # Telemetry.
    latency_window_s: float = 24 * 3600.0
    percentile_refresh_s: float = 10.0
    retention: Retention = field(default_factory=Retention)
    # Idempotent enqueue holds at least this long (SPEC; Svix's eventId):
    # the unique (event_id, endpoint_id) index covers every row kept, so it
    # holds as long as a delivery's row does; `run` warns when a retention
    # would delete rows sooner.
    dedup_window_s: float = DAY_S
    response_body_cap: int = 4096
    # Security and privacy.
    secret_key: str | None = None  # DISPATCHER_SECRET_KEY: encrypts endpoint secrets at rest
    allowed_networks: tuple[str, ...] = ()  # private networks allowed despite the SSRF guard
    # Brokers (scheme://host:port) a tenant's endpoint may publish to; the
    # operator's may use any (SPEC "Destinations").
    brokers_allowed: frozenset[str] = frozenset()
    max_payload_bytes: int = 256 * 1024
    # Failed credentials per client address per minute before 429 (0: off).
    auth_failures_per_min: int = 20
    # Egress: extra trusted CA certificates (PEM) for https targets, beside
    # the system store (DISPATCHER_CA_FILE).
    ca_file: Path | None = None
    sensitive_fields: tuple[str, ...] = SENSITIVE_FIELDS
    # Egress: every request through this HTTP proxy (DISPATCHER_HTTP_PROXY).
    http_proxy: str | None = None
    log_level: str = "info"  # DISPATCHER_LOG_LEVEL: debug, info, warning
    # DISPATCHER_LOG_FORMAT: json, text, or auto (text when stderr is a terminal).
    log_format: str = "auto"
    own_server: OwnServer | None = None  # set by the admin server, never from the environment

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        return cls(
            database_url=_database_url(env),
            home=Path(env["DISPATCHER_HOME"]) if env.get("DISPATCHER_HOME") else default_home(env),
            allow_private_targets=env.get("DISPATCHER_ALLOW_PRIVATE_TARGETS", "") == "1",
            admin_token=env.get("DISPATCHER_ADMIN_TOKEN") or None,
            allow_weak_admin_token=env.get("DISPATCHER_ALLOW_WEAK_ADMIN_TOKEN", "") == "1",
            max_in_flight=_fixed_window(env),
            batch_size=max(1, _int(env, "DISPATCHER_BATCH_SIZE", 500)),
            poll_interval_s=_float(env, "DISPATCHER_POLL_INTERVAL_S", 1.0),
            grace_s=_float(env, "DISPATCHER_GRACE_S", 25.0),
            endpoint_refresh_s=max(0.05, _float(env, "DISPATCHER_REFRESH_S", 1.0)),
            synchronous_commit=env.get("DISPATCHER_SYNCHRONOUS_COMMIT", "") == "1",
            # The lease adds a 1 s token lookahead to this margin: 59 keeps the
            # whole margin within the contract's 60 s.
            lease_margin_s=min(_float(env, "DISPATCHER_LEASE_MARGIN_S", 30.0), 59.0),
            latency_window_s=_float(env, "DISPATCHER_LATENCY_WINDOW_S", 24 * 3600.0),
            percentile_refresh_s=_float(env, "DISPATCHER_PERCENTILE_REFRESH_S", 10.0),
            retention=_retention(env),
            dedup_window_s=max(1.0, _float(env, "DISPATCHER_DEDUP_WINDOW_S", DAY_S)),
            secret_key=env.get("DISPATCHER_SECRET_KEY") or None,
            allowed_networks=_networks(env.get("DISPATCHER_ALLOWED_NETWORKS", "")),
            brokers_allowed=_brokers(env.get("DISPATCHER_BROKERS_ALLOWED", "")),
            max_payload_bytes=max(1, _int(env, "DISPATCHER_MAX_PAYLOAD_BYTES", 256 * 1024)),
            auth_failures_per_min=_int(env, "DISPATCHER_AUTH_FAILURES_PER_MIN", 20),
            sensitive_fields=_names(env.get("DISPATCHER_SENSITIVE_FIELDS"), SENSITIVE_FIELDS),
            http_proxy=env.get("DISPATCHER_HTTP_PROXY") or None,
            ca_file=Path(env["DISPATCHER_CA_FILE"]) if env.get("DISPATCHER_CA_FILE") else None,
            log_level=env.get("DISPATCHER_LOG_LEVEL") or "info",
            log_format=_log_format(env),
        )

    def target_policy(self) -> TargetPolicy:
        return TargetPolicy(
            allow_private=self.allow_private_targets,
            allowed_networks=self.allowed_networks,
            brokers_allowed=self.brokers_allowed,
            names_via_proxy=self.http_proxy is not None,
            own_origins=tuple(self.own_server.origins) if self.own_server else (),
            credentials=tuple(
                dict.fromkeys(
                    t for t in (self.admin_token, self.own_server and self.own_server.token) if t
                )
            ),
        )

    def secret_box(self) -> SecretBox | None:
        return SecretBox(self.secret_key) if self.secret_key else None


# The environment, for people. Kept beside from_env so that a new variable
# and its line here arrive in one change; the test in
# tests/unit/test_configuration_docs.py holds the two together.


@dataclass(frozen=True, slots=True)
class Variable:
    name: str
    meaning: str  # Markdown, one line
    default: str  # as text: what happens when it is unset


ENVIRONMENT: tuple[Variable, ...] = (
    Variable(
        "DATABASE_URL",
        "PostgreSQL URL of the queue; may name every node of a cluster "
        "(`postgresql://u@pg1,pg2/db?target_session_attrs=read-write`, see "
        "[scaling](scaling.md#several-hosts-in-database_url)); anything but a `postgresql://` "
        "or `postgres://` URL is refused at start (exit 2)",
        "unset: an embedded PostgreSQL (pgserver) under `$DISPATCHER_HOME/pgdata`",
    ),
    Variable(
        "DISPATCHER_HOME",
        "state folder of the embedded PostgreSQL (its data in `pgdata/` there); the first "
        "command that starts the server says where",
        "the user's data folder: `$XDG_DATA_HOME/dispatcher`, else "
        "`~/.local/share/dispatcher`, whatever the working directory; the Makefile's "
        "targets set `./.dispatcher` (the checkout's own)",
    ),
    Variable(
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "each attempt exported as an OpenTelemetry client span over OTLP/HTTP (with the `otel` "
        "extra; `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` too); the SDK reads the other standard "
        "`OTEL_*` variables (sampler, service name, batching, `OTEL_SDK_DISABLED`); spans "
        "are made and exported by an exporter process beside each worker: "
        "[traces](../guide/traces.md)",
        "unset: no spans exported (a producer's traceparent still reaches the receiver)",
    ),
    Variable(
        "XDG_DATA_HOME",
        "the user's data folder (XDG base directories), read only for `DISPATCHER_HOME`'s "
        "default; a relative path is ignored",
        "`~/.local/share`",
    ),
    Variable(
        "DISPATCHER_ALLOW_PRIVATE_TARGETS",
        "`1` allows loopback, private and link-local destinations",
        "off: such targets are refused (the SSRF guard)",
    ),
    Variable(
        "DISPATCHER_ALLOWED_NETWORKS",
        "comma-separated private networks allowed despite the SSRF guard (`10.1.0.0/16,fd00::/8`)",
        "none",
    ),
    Variable(
        "DISPATCHER_BROKERS_ALLOWED",
        "comma-separated brokers (`amqp://mq.internal:5672,nats://10.0.0.7:4222`) a tenant's "
        "endpoint may publish to, trusted wherever they are (a private address too): "
        "[destinations](../guide/destinations.md)",
        "none: only the operator's endpoints publish to brokers",
    ),
    Variable(
        "DISPATCHER_ADMIN_TOKEN",
        "bearer token of the admin API and the dashboard's sign-in",
        "a random one per run, printed once on stderr",
    ),
    Variable(
        "DISPATCHER_ALLOW_WEAK_ADMIN_TOKEN",
        "`1` serves the admin API on a non-loopback address with a `DISPATCHER_ADMIN_TOKEN` "
        "under 32 characters (a warning, not a refusal)",
        "off: such a token is refused there (exit 2) and warned about on loopback",
    ),
    Variable(
        "DISPATCHER_SECRET_KEY",
        "encrypts endpoint secrets, client keys and header values at rest (AES-GCM): 32 random "
        "bytes in base64 (`openssl rand -base64 32`) are the key; any other string is hashed "
        "(SHA-256) into one",
        "unset: stored as given",
    ),
    Variable(
        "DISPATCHER_MAX_IN_FLIGHT",
        "requests one worker keeps in flight, fixed (`run --max-in-flight`); `auto` sizes it",
        "sized by the worker from its event loop's headroom (starts at 1,000)",
    ),
    Variable(
        "DISPATCHER_BATCH_SIZE", "rows one claim may take at most (`run --batch-size`)", "500"
    ),
    Variable(
        "DISPATCHER_POLL_INTERVAL_S",
        "seconds between full polls, behind the idle probe and LISTEN",
        "1.0",
    ),
    Variable(
        "DISPATCHER_GRACE_S",
        "seconds that requests already on the wire get to finish after SIGTERM",
        "25",
    ),
    Variable(
        "DISPATCHER_LEASE_MARGIN_S",
        "a claim's lease is the endpoint's timeout + 1 s + this margin (at most 59)",
        "30",
    ),
    Variable(
        "DISPATCHER_REFRESH_S",
        "seconds between a worker's reloads of endpoints and heartbeats (at least 0.05)",
        "1.0",
    ),
    Variable(
        "DISPATCHER_SYNCHRONOUS_COMMIT",
        "`1`: the worker's claims and outcomes wait for the WAL flush",
        "off: asynchronous commit for the worker's own writes",
    ),
    Variable(
        "DISPATCHER_LATENCY_WINDOW_S",
        "seconds the percentiles cover (from per-minute histograms); the attempt log"
        " itself is kept for DISPATCHER_RETENTION_ATTEMPTS_S",
        "86400 (24 h)",
    ),
    Variable(
        "DISPATCHER_PERCENTILE_REFRESH_S",
        "seconds between the stored percentiles' refreshes (one worker at a time)",
        "10",
    ),
    *(Variable(name, text, default) for name, text, default in RETENTION_HELP),
    Variable(
        "DISPATCHER_DEDUP_WINDOW_S",
        "enqueueing an event id again for the same endpoint creates nothing while its delivery"
        " is still to be made and for this long after it became final (seconds); after that the"
        " id is new again, as Svix's `eventId`. Cut to the shortest retention of final rows"
        " (`run` warns when it is). The workers store it in the database, where the SQL enqueue"
        " reads it",
        "86400 (24 h, as Svix's `eventId`)",
    ),
    Variable(
        "DISPATCHER_MAX_PAYLOAD_BYTES",
        "largest payload accepted at enqueue (the SQL functions read "
        "`dispatcher.max_payload_bytes` instead)",
        "262144 (256 KiB)",
    ),
    Variable(
        "DISPATCHER_AUTH_FAILURES_PER_MIN",
        "failed credentials (bearer tokens, dashboard sign-ins, portal codes) per client "
        "address per minute before 429; `0` turns it off",
        "20",
    ),
    Variable(
        "DISPATCHER_SENSITIVE_FIELDS",
        "comma-separated field names redacted from every structured log, at any depth",
        "`" + ",".join(SENSITIVE_FIELDS) + "`",
    ),
    Variable(
        "DISPATCHER_HTTP_PROXY",
        "every request through this HTTP proxy (CONNECT for https), for a fixed egress IP",
        "unset: direct",
    ),
    Variable(
        "DISPATCHER_CA_FILE",
        "extra trusted CA certificates (PEM) for https targets, beside the system store",
        "unset: the system store only",
    ),
    Variable("DISPATCHER_LOG_LEVEL", "`debug`, `info` or `warning`", "`info`"),
    Variable(
        "DISPATCHER_LOG_FORMAT",
        "`json`: one JSON object per line on stderr; `text`: one sentence per line for a "
        "person (dead letters, breakers, hints); `auto`: text when stderr is a terminal, "
        "else JSON (see [logs](logs.md))",
        "`auto`",
    ),
    Variable(
        "DISPATCHER_DEBUG",
        "`1`: a command that fails prints its traceback (read by the CLI before settings exist)",
        "off: one line on stderr",
    ),
)


def markdown_table(variables: tuple[Variable, ...] = ENVIRONMENT) -> str:
    """The variables as a Markdown table, one row each, in the order given."""
    lines = ["| variable | meaning | default |", "| --- | --- | --- |"]
    for v in variables:
        cells = (f"`{v.name}`", v.meaning, v.default)
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"


def configuration_page() -> str:
    """docs/operations/configuration.md, whole."""
    return (
        "# Configuration\n\n"
        "<!-- Generated from dispatcher/settings.py (ENVIRONMENT) by `make docs`; "
        "edit that table, not this page. -->\n\n"
        "Every process reads these environment variables when it starts; a bad value "
        "is one line on stderr and exit 2. Per-endpoint settings are fields of the "
        "endpoint, not variables: see [Endpoints](../guide/endpoints.md).\n\n"
        + markdown_table()
        + _database_settings()
    )


# Settings every process and producer must agree on live in the database,
# not in each process's environment: (setting, command, meaning, default).
IN_DATABASE = (
    (
        "wake-up",
        "`dispatcher wake [notify|probe] [--json]`, or `GET`/`PUT /v1/settings/wake` (admin)",
        "how idle workers learn of new rows. `probe`: producers commit without NOTIFY and "
        "each idle worker queries for new rows 100 times a second. `notify`: each enqueue "
        "call that queues rows due now sends one NOTIFY, and idle workers run no query; "
        "producers' commits then take PostgreSQL's notify lock one at a time. Without a "
        'mode the command prints it (`{"wake", "updated_at"}` with `--json`); a change '
        "reaches running workers within milliseconds and producers at their next call. "
        "Which to pick: [scaling](scaling.md#notify-or-probe-which-to-pick)",
        "`probe`",
    ),
)


def _database_settings() -> str:
    lines = ["| setting | command | meaning | default |", "| --- | --- | --- | --- |"]
    for cells in IN_DATABASE:
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return (
        "\n## Held in the database\n\n"
        "One value for the whole deployment, read by every worker and by the SQL\n"
        "enqueue functions, so it is set once with a command rather than in each\n"
        "process's environment:\n\n" + "\n".join(lines) + "\n"
    )


if __name__ == "__main__":
    sys.stdout.write(configuration_page())
