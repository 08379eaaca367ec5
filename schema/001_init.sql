-- dispatcher: the delivery queue, endpoints, latency samples, breakers.

CREATE TABLE endpoints (
    id                bigserial PRIMARY KEY,
    url               text NOT NULL,
    secret            text NOT NULL,
    event_types       text[] NOT NULL DEFAULT '{*}',
    rate_per_s        double precision CHECK (rate_per_s IS NULL OR rate_per_s > 0),
    burst             integer CHECK (burst IS NULL OR burst > 0),
    max_in_flight     integer NOT NULL DEFAULT 100 CHECK (max_in_flight > 0),
    timeout_ms        integer NOT NULL DEFAULT 15000 CHECK (timeout_ms > 0),
    max_attempts      integer NOT NULL DEFAULT 5 CHECK (max_attempts > 0),
    retry_base_ms     integer NOT NULL DEFAULT 30000 CHECK (retry_base_ms >= 0),
    retry_cap_ms      integer NOT NULL DEFAULT 3600000 CHECK (retry_cap_ms >= 0),
    failure_threshold integer NOT NULL DEFAULT 10 CHECK (failure_threshold > 0),
    cooldown_s        double precision NOT NULL DEFAULT 300 CHECK (cooldown_s > 0),
    -- Extra request headers (validated: no CR/LF, none of the signature headers).
    headers           jsonb NOT NULL DEFAULT '{}',
    enabled           boolean NOT NULL DEFAULT true,
    disabled_reason   text,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now()
);

-- Secrets rotated out but still signing until expires_at (Standard Webhooks
-- lets a request carry several signatures).
CREATE TABLE endpoint_secrets (
    endpoint_id bigint NOT NULL REFERENCES endpoints (id) ON DELETE CASCADE,
    secret      text NOT NULL,
    expires_at  timestamptz NOT NULL,
    PRIMARY KEY (endpoint_id, secret)
);

CREATE TABLE webhook_queue (
    id               bigserial PRIMARY KEY,
    endpoint_id      bigint NOT NULL REFERENCES endpoints (id) ON DELETE CASCADE,
    event_id         text NOT NULL,
    event_type       text NOT NULL,
    -- json (not jsonb) keeps the producer's bytes exactly: that is what we sign.
    payload          json NOT NULL,
    status           text NOT NULL DEFAULT 'pending'
                     CHECK (status IN ('pending', 'in_flight', 'delivered', 'failed', 'dead_letter')),
    attempt_count    integer NOT NULL DEFAULT 0,
    max_attempts     integer NOT NULL DEFAULT 5,
    created_at       timestamptz NOT NULL DEFAULT now(),
    -- For pending/failed rows: when the row is due. For in_flight rows: when
    -- the lease runs out, so a dead worker's rows become due again and one
    -- index serves both the claim and the reclaim.
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    delivered_at     timestamptz,
    updated_at       timestamptz NOT NULL DEFAULT now(),
    locked_by        text,
    last_error       text,
    last_status_code integer,
    last_response_ms integer,
    -- Unique on (endpoint_id, event_id); event_id first so the same index
    -- also serves lookups of one event's deliveries.
    CONSTRAINT webhook_queue_endpoint_event_key UNIQUE (event_id, endpoint_id)
);

-- The claim: per endpoint, the earliest due rows among the live ones. Rows
-- that are delivered or dead leave the index, so it stays as small as the
-- backlog however large the history grows.
CREATE INDEX webhook_queue_due_idx ON webhook_queue (endpoint_id, next_attempt_at)
    WHERE status IN ('pending', 'failed', 'in_flight');
CREATE INDEX webhook_queue_dead_idx ON webhook_queue (endpoint_id, updated_at)
    WHERE status = 'dead_letter';
-- Delivered rows arrive in delivered_at order: a BRIN index (a few pages
-- for millions of rows) serves the last-hour counts and retention, and costs
-- the hot path almost nothing to maintain, unlike a B-tree entry per row.
CREATE INDEX webhook_queue_delivered_idx ON webhook_queue USING brin (delivered_at)
    WHERE status = 'delivered';

-- One row per attempt: the percentile samples, and each delivery's attempt log.
CREATE TABLE endpoint_latency (
    endpoint_id bigint NOT NULL REFERENCES endpoints (id) ON DELETE CASCADE,
    response_ms integer NOT NULL,
    status_code integer,
    measured_at timestamptz NOT NULL DEFAULT now(),
    delivery_id bigint,
    error       text
);
CREATE INDEX endpoint_latency_endpoint_time_idx ON endpoint_latency (endpoint_id, measured_at);
-- Append-only in time (and delivery id) order: BRIN keeps pruning and the
-- attempt log cheap without a B-tree entry per sample on the hot path.
CREATE INDEX endpoint_latency_time_idx ON endpoint_latency USING brin (measured_at);
CREATE INDEX endpoint_latency_delivery_idx ON endpoint_latency USING brin (delivery_id);

CREATE TABLE endpoint_health (
    endpoint_id          bigint PRIMARY KEY REFERENCES endpoints (id) ON DELETE CASCADE,
    state                text NOT NULL DEFAULT 'closed' CHECK (state IN ('closed', 'open', 'half_open')),
    consecutive_failures integer NOT NULL DEFAULT 0,
    failure_threshold    integer NOT NULL DEFAULT 10,
    opened_at            timestamptz,
    cooldown_seconds     double precision NOT NULL DEFAULT 300,
    probe_owner          text,
    probe_started_at     timestamptz,
    -- Retry-After on 429/503 pauses the whole endpoint, for every worker.
    paused_until         timestamptz,
    p50_ms               double precision,
    p95_ms               double precision,
    p99_ms               double precision,
    sample_count         integer NOT NULL DEFAULT 0,
    last_failure_at      timestamptz,
    last_success_at      timestamptz,
    updated_at           timestamptz NOT NULL DEFAULT now()
);

-- Live workers: each takes its share of every endpoint's rate and in-flight
-- limit, so the limits hold for the endpoint as a whole.
CREATE TABLE dispatcher_workers (
    worker_id    text PRIMARY KEY,
    host         text NOT NULL,
    pid          integer NOT NULL,
    started_at   timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now()
);

-- Breaker transitions, kept for the story of an endpoint.
CREATE TABLE breaker_transitions (
    endpoint_id bigint NOT NULL REFERENCES endpoints (id) ON DELETE CASCADE,
    from_state  text NOT NULL,
    to_state    text NOT NULL,
    cooldown_seconds double precision,
    at          timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX breaker_transitions_endpoint_idx ON breaker_transitions (endpoint_id, at);

-- The functions and triggers on these tables (the enqueue functions, the
-- endpoint_health row of a new endpoint) are defined in schema/functions/,
-- which `dispatcher migrate` applies after the numbered migrations.
