-- Limits: what one application may set. Every numeric endpoint setting gets
-- the range the API, the CLI and the Python API enforce (SPEC "Limits"), so
-- a row written by hand or by an older release cannot hold a value that
-- stops or starves a worker (rate_per_s 1e308 once stopped every one).
--
-- Existing rows out of range are CLAMPED into it, not set aside: a too-big
-- rate or burst becomes the largest allowed, a too-small one the smallest;
-- their deliveries go on under the clamped value. NaN compares above every
-- number in PostgreSQL, so it clamps to the top of the range.
--
-- What this costs on a live system: endpoints is rewritten in place for the
-- rows out of range only (usually none) and scanned once per constraint
-- under its ACCESS EXCLUSIVE lock (milliseconds for thousands of
-- endpoints); webhook_queue is not touched by the constraints. Success-body
-- patterns that RE2 cannot compile are set aside by `dispatcher migrate`
-- after this file (db.py: the endpoint is disabled with a reason).
UPDATE endpoints SET
    rate_per_s        = LEAST(GREATEST(rate_per_s, 0.001), 100000),
    burst             = LEAST(GREATEST(burst, 1), 100000),
    max_in_flight     = LEAST(GREATEST(max_in_flight, 1), 10000),
    timeout_ms        = LEAST(GREATEST(timeout_ms, 100), 300000),
    max_attempts      = LEAST(GREATEST(max_attempts, 1), 100),
    retry_base_ms     = LEAST(GREATEST(retry_base_ms, 0), 86400000),
    retry_cap_ms      = LEAST(GREATEST(retry_cap_ms, 0), 604800000),
    failure_threshold = LEAST(GREATEST(failure_threshold, 1), 10000),
    cooldown_s        = LEAST(GREATEST(cooldown_s, 1), 86400)
WHERE NOT (
    (rate_per_s IS NULL OR rate_per_s BETWEEN 0.001 AND 100000)
    AND (burst IS NULL OR burst BETWEEN 1 AND 100000)
    AND max_in_flight BETWEEN 1 AND 10000
    AND timeout_ms BETWEEN 100 AND 300000
    AND max_attempts BETWEEN 1 AND 100
    AND retry_base_ms BETWEEN 0 AND 86400000
    AND retry_cap_ms BETWEEN 0 AND 604800000
    AND failure_threshold BETWEEN 1 AND 10000
    AND cooldown_s BETWEEN 1 AND 86400
);

ALTER TABLE endpoints
    ADD CONSTRAINT endpoints_rate_per_s_range
        CHECK (rate_per_s IS NULL OR rate_per_s BETWEEN 0.001 AND 100000),
    ADD CONSTRAINT endpoints_burst_range CHECK (burst IS NULL OR burst BETWEEN 1 AND 100000),
    ADD CONSTRAINT endpoints_max_in_flight_range CHECK (max_in_flight BETWEEN 1 AND 10000),
    ADD CONSTRAINT endpoints_timeout_ms_range CHECK (timeout_ms BETWEEN 100 AND 300000),
    ADD CONSTRAINT endpoints_max_attempts_range CHECK (max_attempts BETWEEN 1 AND 100),
    ADD CONSTRAINT endpoints_retry_base_ms_range CHECK (retry_base_ms BETWEEN 0 AND 86400000),
    ADD CONSTRAINT endpoints_retry_cap_ms_range CHECK (retry_cap_ms BETWEEN 0 AND 604800000),
    ADD CONSTRAINT endpoints_failure_threshold_range
        CHECK (failure_threshold BETWEEN 1 AND 10000),
    ADD CONSTRAINT endpoints_cooldown_s_range CHECK (cooldown_s BETWEEN 1 AND 86400);

-- Errors as a fixed vocabulary (SPEC "Limits"): older releases stored an
-- exception's text, which could hold the request URL with macro values
-- filled in, or bytes a receiver sent. Such rows keep only their class.
-- One scan of each table; only the rows rewritten are locked.
-- dispatcher_error_class is this step's own helper, gone at its end.
CREATE FUNCTION dispatcher_error_class(p_error text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT AS $$
    SELECT CASE
        WHEN p_error ~ '^(HTTP [0-9]{3}|timeout after [0-9]+ ms|missing macro: [A-Za-z0-9_.]{1,200}|response did not match success_body|endpoint deleted|internal error: \w{1,80}|payload unreadable: \w{1,80})$'
            THEN p_error
        WHEN p_error LIKE 'connection error:%' THEN 'connection error'
        WHEN p_error LIKE 'TimeoutError%' THEN 'timeout'
        WHEN p_error LIKE 'ServerDisconnectedError%' THEN 'connection reset: closed before the response'
        WHEN p_error LIKE 'ClientResponseError%' OR p_error LIKE 'ClientPayloadError%' THEN 'bad response'
        WHEN p_error LIKE 'refused target%' THEN 'refused target'
        WHEN p_error LIKE 'endpoint unusable%' THEN 'endpoint unusable'
        ELSE 'request failed'
    END
$$;

UPDATE webhook_queue SET last_error = dispatcher_error_class(last_error)
WHERE last_error IS DISTINCT FROM dispatcher_error_class(last_error);
UPDATE endpoint_latency SET error = dispatcher_error_class(error)
WHERE error IS DISTINCT FROM dispatcher_error_class(error);
DROP FUNCTION dispatcher_error_class(text);

-- Per-application quotas, set by the operator (NULL: no quota). Enforced on
-- the HTTP API; producers calling the SQL functions are trusted code.
ALTER TABLE applications
    ADD COLUMN max_endpoints integer CHECK (max_endpoints IS NULL OR max_endpoints BETWEEN 0 AND 1000000),
    ADD COLUMN max_events_per_s double precision
        CHECK (max_events_per_s IS NULL OR max_events_per_s BETWEEN 0.001 AND 1000000);

-- The events quota's token bucket, kept on the application's row so that it
-- holds across API processes (queries.sql: take_event_tokens): the level at
-- event_tokens_at (NULL: full). Capacity max(1, rate), refilled at rate per
-- second by the database's clock; an application without a quota never
-- writes these.
ALTER TABLE applications
    ADD COLUMN event_tokens double precision,
    ADD COLUMN event_tokens_at timestamptz;

-- The bucket's level (dispatcher_bucket_level): schema/functions/applications.sql.
