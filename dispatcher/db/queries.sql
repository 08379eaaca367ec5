-- Named queries, loaded by dispatcher.db (Q) and bound to connections by
-- db.store (the worker) and db.catalog (the entry points); `-- name: x`
-- starts block x.

-- name: claim_batch
-- One statement claims across endpoints: each endpoint contributes at most
-- the rows it can start now (its budget), in the order the engine rotates for
-- fairness. in_flight rows whose lease ran out are due again (reclaim).
WITH budget AS (
    SELECT * FROM unnest($1::bigint[], $2::int[], $3::float8[]) WITH ORDINALITY
        AS b(endpoint_id, n, lease_s, ord)
), picked AS (
    SELECT q.id, b.lease_s
    FROM budget b
    CROSS JOIN LATERAL (
        SELECT w.id FROM webhook_live w
        WHERE w.endpoint_id = b.endpoint_id
          AND w.status IN ('pending', 'failed', 'in_flight')
          AND w.next_attempt_at <= now()
          -- FIFO: only the head of its lane (no earlier live row of the
          -- same key), whichever worker or host holds the earlier one.
          AND (w.order_key IS NULL OR NOT EXISTS (
                SELECT 1 FROM webhook_live h
                WHERE h.endpoint_id = w.endpoint_id AND h.order_key = w.order_key
                  AND h.status IN ('pending', 'failed', 'in_flight') AND h.id < w.id))
        ORDER BY w.next_attempt_at
        LIMIT b.n
        FOR UPDATE SKIP LOCKED
    ) q
    LIMIT $4
)
UPDATE webhook_live w
SET status = 'in_flight',
    next_attempt_at = now() + make_interval(secs => picked.lease_s),
    locked_by = $5,
    updated_at = now()
FROM picked
WHERE w.id = picked.id
-- The payload inline, else the event's one copy (schema 025): only fan-out
-- rows pay the lookup, in one day of event_payloads. As UTF-8 bytes, which
-- are what is sent: text would be decoded into a str only to be encoded.
RETURNING w.id, w.endpoint_id, w.event_id,
          convert_to(coalesce(w.payload, (SELECT p.body FROM event_payloads p
                                          WHERE p.id = w.payload_id
                                            AND p.created_at = w.payload_at))::text, 'UTF8')
              AS payload,
          w.attempt_count, w.max_attempts, w.event_type, w.traceparent, w.tracestate,
          -- core.models.ClaimedRow's fields, in order: erased is the
          -- client's to set, where the payload came back NULL.
          false AS erased;

-- name: record_outcomes
-- Every outcome of a flush in one statement: the queue rows, and a latency
-- sample for each attempt that reached the wire (or timed out on it).
-- A row takes its outcome while this worker holds it; or, when the server
-- lost the claim (a failover, a crash: the row is back to pending or
-- failed) or another worker handed it back unsent after the lease ran
-- out, while no attempt was recorded since the one this outcome is for
-- ($10, the attempt count at the claim) and no one holds it. A retry or a
-- hand-back stays in webhook_live; a delivered or dead row leaves it for
-- history in the same statement (schema 026: the DELETE's RETURNING is
-- the INSERT's rows, with the columns dispatcher_settle maps).
WITH o AS (
    SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::float8[], $5::bool[],
                         $6::int[], $7::int[], $8::text[], $10::int[], $11::jsonb[])
        AS o(id, endpoint_id, status, delay_s, spent, status_code, response_ms, error, attempt,
             detail)
), upd AS (
    UPDATE webhook_live w
    SET status = CASE WHEN o.status = 'pending' AND w.attempt_count > 0 THEN 'failed'
                      ELSE o.status END,
        attempt_count = w.attempt_count + o.spent::int,
        next_attempt_at = CASE WHEN o.status IN ('pending', 'failed')
                               THEN now() + make_interval(secs => o.delay_s)
                               ELSE w.next_attempt_at END,
        last_error = CASE WHEN o.spent THEN o.error ELSE w.last_error END,
        last_status_code = CASE WHEN o.spent THEN o.status_code ELSE w.last_status_code END,
        last_response_ms = CASE WHEN o.spent THEN o.response_ms ELSE w.last_response_ms END,
        locked_by = NULL,
        updated_at = now()
    FROM o
    WHERE w.id = o.id AND o.status NOT IN ('delivered', 'dead_letter')
      AND ((w.status = 'in_flight' AND w.locked_by = $9)
           OR (w.status IN ('pending', 'failed') AND w.attempt_count = o.attempt))
    RETURNING 1
), gone AS (
    DELETE FROM webhook_live w
    USING o
    WHERE w.id = o.id AND o.status IN ('delivered', 'dead_letter')
      AND ((w.status = 'in_flight' AND w.locked_by = $9)
           OR (w.status IN ('pending', 'failed') AND w.attempt_count = o.attempt))
    RETURNING w.*, o.status AS final, o.spent, o.status_code AS code, o.response_ms AS ms,
              o.error AS err
), settled AS (
    INSERT INTO webhook_history (id, endpoint_id, event_id, event_type, payload, status,
        attempt_count, max_attempts, created_at, next_attempt_at, delivered_at, updated_at,
        locked_by, last_error, last_status_code, last_response_ms, order_key, resent_at,
        payload_erased_at, traceparent, tracestate, payload_id, payload_at, finished_at)
    SELECT id, endpoint_id, event_id, event_type, payload, final, attempt_count + spent::int,
           max_attempts, created_at, next_attempt_at,
           CASE WHEN final = 'delivered' THEN now() ELSE delivered_at END, now(), NULL,
           CASE WHEN spent OR final = 'dead_letter' THEN err ELSE last_error END,
           CASE WHEN spent THEN code ELSE last_status_code END,
           CASE WHEN spent THEN ms ELSE last_response_ms END,
           order_key, resent_at, payload_erased_at, traceparent, tracestate, payload_id,
           payload_at, now()
    FROM gone
), lat AS (
    INSERT INTO endpoint_latency (endpoint_id, response_ms, status_code, delivery_id, error,
                                  detail)
    SELECT o.endpoint_id, o.response_ms, o.status_code, o.id, o.error, o.detail
    FROM o WHERE o.spent
), minutes AS (
    -- Final outcomes into their minutes (the attempts are counted by the
    -- attempt log's trigger, schema/functions/latency.sql).
    SELECT dispatcher_count_minutes(array_agg(endpoint_id), array_agg(now()), array_agg(final),
                                    array_agg(false), array_agg(code), array_agg(ms))
    FROM gone
)
-- End-to-end lags of what was delivered, for the lag histogram (after the
-- minutes: a CTE that only selects runs when it is read; `settled`, a
-- write, runs whether read or not).
SELECT coalesce((SELECT array_agg(extract(epoch FROM now() - created_at)::float8)
                 FROM gone WHERE final = 'delivered'), '{}')
FROM minutes;

-- name: server_identity
-- Which server this connection reached, as far as outcomes are concerned:
-- its timeline (from the WAL file being written: it changes at promotion,
-- before any checkpoint does) and when its postmaster started (it changes
-- at a restart, and tells two servers apart). Anyone may call these.
SELECT CASE WHEN pg_is_in_recovery() THEN 'standby'
            ELSE substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8) END
       || '@' || extract(epoch FROM pg_postmaster_start_time())::numeric::text;

-- name: rewrite_outcomes
-- After a failover (core.failover): outcomes another server acknowledged,
-- in the order they were written, applied again to the rows this server
-- still holds as they were before them (or earlier): not final, attempted
-- no later than the outcome's attempt, and not claimed by another worker
-- whose lease still runs. A row takes its last outcome; the latency
-- samples lost with the row's update are inserted again, with their time
-- ($10: seconds since the first write). Returns the rows changed with
-- their attempt count before, so the caller announces only what was lost.
WITH o AS (
    SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::float8[], $5::bool[],
                         $6::int[], $7::int[], $8::text[], $9::int[], $10::float8[])
        WITH ORDINALITY
        AS o(id, endpoint_id, status, delay_s, spent, status_code, response_ms, error,
             attempt, ago_s, seq)
), latest AS (
    SELECT DISTINCT ON (id) * FROM o ORDER BY id, seq DESC
), due AS (
    SELECT w.id, w.attempt_count AS before
    FROM webhook_live w JOIN latest l ON l.id = w.id
    WHERE w.status IN ('pending', 'failed', 'in_flight')
      AND w.attempt_count <= l.attempt
      AND (w.status <> 'in_flight' OR w.locked_by = $11 OR w.next_attempt_at <= now())
    FOR UPDATE OF w
), upd AS (
    UPDATE webhook_live w
    SET status = CASE WHEN l.status = 'pending' AND l.attempt + l.spent::int > 0 THEN 'failed'
                      ELSE l.status END,
        attempt_count = l.attempt + l.spent::int,
        next_attempt_at = CASE WHEN l.status IN ('pending', 'failed')
                               THEN now() + make_interval(secs => greatest(l.delay_s - l.ago_s, 0))
                               ELSE w.next_attempt_at END,
        delivered_at = CASE WHEN l.status = 'delivered'
                            THEN now() - make_interval(secs => l.ago_s) ELSE w.delivered_at END,
        last_error = CASE WHEN l.spent OR l.status = 'dead_letter' THEN l.error
                          ELSE w.last_error END,
        last_status_code = CASE WHEN l.spent THEN l.status_code ELSE w.last_status_code END,
        last_response_ms = CASE WHEN l.spent THEN l.response_ms ELSE w.last_response_ms END,
        locked_by = NULL,
        updated_at = now() - make_interval(secs => l.ago_s)
    FROM due JOIN latest l ON l.id = due.id
    WHERE w.id = due.id
    RETURNING w.id, due.before
), lat AS (
    INSERT INTO endpoint_latency (endpoint_id, response_ms, status_code, delivery_id, error,
                                  measured_at)
    SELECT o.endpoint_id, o.response_ms, o.status_code, o.id, o.error,
           now() - make_interval(secs => o.ago_s)
    FROM o JOIN upd ON upd.id = o.id
    WHERE o.spent AND o.attempt >= upd.before
), minutes AS (
    -- Each row's final outcome into its minute (the samples above are
    -- counted by the attempt log's trigger).
    SELECT dispatcher_count_minutes(array_agg(l.endpoint_id),
                                    array_agg(now() - make_interval(secs => l.ago_s)),
                                    array_agg(l.status), array_agg(false),
                                    array_agg(l.status_code), array_agg(l.response_ms))
    FROM latest l JOIN upd ON upd.id = l.id
    WHERE l.status IN ('delivered', 'dead_letter')
)
SELECT upd.id, upd.before FROM upd, minutes;

-- name: lock_health
-- The stored breakers of a flush, locked, with what the fold needs: the
-- endpoint's own threshold and base cooldown, and the database clock.
SELECT h.endpoint_id, h.state, h.consecutive_failures,
       extract(epoch FROM h.opened_at)::float8 AS opened_at, h.cooldown_seconds,
       extract(epoch FROM h.last_failure_at)::float8 AS last_failure_at,
       extract(epoch FROM h.last_success_at)::float8 AS last_success_at, h.p95_ms,
       e.failure_threshold, e.cooldown_s, extract(epoch FROM now())::float8 AS db_now,
       h.failure_times, e.disable_after, e.disable_within_s
FROM endpoint_health h JOIN endpoints e ON e.id = h.endpoint_id
WHERE h.endpoint_id = ANY($1::bigint[])
ORDER BY h.endpoint_id
FOR UPDATE OF h;

-- name: store_health
UPDATE endpoint_health h
SET state = s.state,
    consecutive_failures = s.consecutive_failures,
    opened_at = to_timestamp(s.opened_at),
    cooldown_seconds = s.cooldown_s,
    failure_threshold = s.threshold,
    last_failure_at = to_timestamp(s.last_failure_at),
    last_success_at = to_timestamp(s.last_success_at),
    probe_owner = CASE WHEN s.state = 'half_open' THEN h.probe_owner END,
    probe_started_at = CASE WHEN s.state = 'half_open' THEN h.probe_started_at END,
    -- Each as an array literal: unnest would flatten an array of arrays.
    failure_times = s.failure_times::float8[],
    updated_at = now()
FROM unnest($1::bigint[], $2::text[], $3::int[], $4::float8[], $5::float8[], $6::int[],
            $7::float8[], $8::float8[], $9::text[])
    AS s(endpoint_id, state, consecutive_failures, opened_at, cooldown_s, threshold,
         last_failure_at, last_success_at, failure_times)
WHERE h.endpoint_id = s.endpoint_id;

-- name: record_transitions
INSERT INTO breaker_transitions (endpoint_id, from_state, to_state, cooldown_seconds)
SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::float8[]);

-- name: disable_gone
-- Returns the endpoints this statement disabled: only they get endpoint.disabled.
UPDATE endpoints SET enabled = false, disabled_reason = '410 Gone from receiver',
       updated_at = now()
WHERE id = ANY($1::bigint[]) AND enabled
RETURNING id;

-- name: disable_auto
-- disable_after failures within disable_within_s (core.autodisable),
-- decided with the breakers locked: the endpoints it disabled, once.
UPDATE endpoints SET enabled = false, disabled_reason = 'auto', updated_at = now()
WHERE id = ANY($1::bigint[]) AND enabled AND deleted_at IS NULL
RETURNING id, application_id;

-- name: begin_probe
-- Exactly one worker wins the half-open probe; a prober that died is
-- replaced once its probe is older than the lease.
WITH won AS (
    UPDATE endpoint_health
    SET state = 'half_open', probe_owner = $2, probe_started_at = now(), updated_at = now()
    WHERE endpoint_id = $1
      AND ((state = 'open' AND opened_at + make_interval(secs => cooldown_seconds) <= now())
           OR (state = 'half_open' AND probe_started_at < now() - make_interval(secs => $3)))
    RETURNING endpoint_id, cooldown_seconds
), logged AS (
    INSERT INTO breaker_transitions (endpoint_id, from_state, to_state, cooldown_seconds)
    SELECT endpoint_id, 'open', 'half_open', cooldown_seconds FROM won
)
SELECT endpoint_id FROM won;

-- name: engine_endpoints
SELECT e.id, e.url, e.secret, e.event_types, e.rate_per_s, e.burst, e.max_in_flight,
       e.timeout_ms, e.max_attempts, e.retry_base_ms, e.retry_cap_ms,
       e.failure_threshold, e.cooldown_s, e.enabled, e.headers, e.method, e.body,
       e.success_body, e.filter, e.ordering, e.ordering_key, e.client_cert, e.client_key,
       e.application_id, e.kind, e.macro_style, e.value_map, e.disable_after,
       e.disable_within_s,
       coalesce(
           (SELECT array_agg(s.secret ORDER BY s.expires_at DESC) FROM endpoint_secrets s
            WHERE s.endpoint_id = e.id AND s.expires_at > now()),
           '{}') AS old_secrets,
       h.state, h.consecutive_failures, extract(epoch FROM h.opened_at)::float8 AS opened_at,
       h.cooldown_seconds, h.probe_owner, h.p95_ms, h.failure_times,
       greatest(0, extract(epoch FROM h.paused_until - now()))::float8 AS paused_for_s,
       extract(epoch FROM now())::float8 AS db_now
FROM endpoints e LEFT JOIN endpoint_health h ON h.endpoint_id = e.id
WHERE e.deleted_at IS NULL AND ($1::bigint IS NULL OR e.id = $1)  -- $1: one (a test shot)
ORDER BY e.id;

-- name: insert_endpoint
INSERT INTO endpoints (url, secret, event_types, rate_per_s, burst, max_in_flight, timeout_ms,
                       max_attempts, retry_base_ms, retry_cap_ms, failure_threshold, cooldown_s,
                       name, description, method, body, success_body, filter, ordering,
                       ordering_key, client_cert, client_key, macro_style, value_map,
                       disable_after, disable_within_s, headers, application_id)
SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17,
       $18::jsonb, $19, $20, $21, $22, $23, $24::jsonb, $25, $26, $27::jsonb, $28::text
-- A deleted application (its row kept by Svix's delete) takes no endpoint:
-- no row comes back, which the caller reports as an unknown application.
WHERE EXISTS (SELECT 1 FROM applications WHERE id = $28::text AND deleted_at IS NULL)
RETURNING *;

-- name: list_endpoints
-- Ops webhooks (kind 'ops', schema 011) are endpoints to the worker only:
-- every read of endpoints a user sees asks for kind 'webhook'.
SELECT * FROM endpoints
WHERE deleted_at IS NULL AND kind = 'webhook' AND ($1::text IS NULL OR application_id = $1)
ORDER BY id;

-- name: endpoint_application
SELECT application_id FROM endpoints WHERE id = $1 AND deleted_at IS NULL AND kind = 'webhook';

-- name: get_endpoint
SELECT * FROM endpoints WHERE id = $1 AND deleted_at IS NULL AND kind = 'webhook';

-- name: lock_endpoint
SELECT * FROM endpoints WHERE id = $1 AND deleted_at IS NULL AND kind = 'webhook' FOR UPDATE;

-- name: set_enabled
UPDATE endpoints
SET enabled = $2, disabled_reason = CASE WHEN $2 THEN NULL ELSE $3 END, updated_at = now()
WHERE id = $1 AND deleted_at IS NULL
RETURNING *;

-- name: lock_secret
SELECT secret FROM endpoints WHERE id = $1 AND deleted_at IS NULL FOR UPDATE;

-- name: keep_secret
-- The rotated-out secret keeps signing alongside the new one until expires_at.
INSERT INTO endpoint_secrets (endpoint_id, secret, expires_at)
VALUES ($1, $2, now() + make_interval(secs => $3))
ON CONFLICT (endpoint_id, secret) DO UPDATE SET expires_at = excluded.expires_at;

-- name: rotate_secret
UPDATE endpoints SET secret = $2, updated_at = now() WHERE id = $1
RETURNING *;

-- name: prune_secrets
DELETE FROM endpoint_secrets WHERE expires_at <= now();

-- name: endpoint_ids
SELECT id, application_id FROM endpoints
WHERE id = ANY($1::bigint[]) AND deleted_at IS NULL AND kind = 'webhook';

-- name: application_ids
-- A deleted application (Svix's delete keeps its row) is unknown here.
SELECT id FROM applications WHERE id = ANY($1::text[]) AND deleted_at IS NULL;

-- name: stage_events
CREATE TEMP TABLE dispatcher_stage (
    event_id text NOT NULL,
    event_type text NOT NULL,
    payload text NOT NULL,
    endpoint_id bigint,
    application_id text
) ON COMMIT DROP;

-- name: fan_out_staged
-- A line reaching more than one endpoint stores its payload once (schema
-- 025, as dispatcher_enqueue_app does): its id taken from the sequence
-- here, so the rows can name it in the same statement.
WITH target AS MATERIALIZED (
    -- Filters and FIFO lanes as dispatcher_enqueue decides them (007).
    SELECT s.ctid AS line, e.id AS endpoint_id, e.max_attempts, s.event_id, s.event_type,
           s.payload,
           dispatcher_order_key(e.ordering, e.ordering_key, s.payload::json) AS order_key
    FROM dispatcher_stage s
    -- A line without an application is the default's; one with an endpoint
    -- id goes to that endpoint (the caller checked it is the line's application's).
    JOIN endpoints e ON e.deleted_at IS NULL AND e.kind = 'webhook' AND CASE WHEN s.endpoint_id IS NULL
        THEN e.application_id = coalesce(s.application_id, 'default') AND e.enabled
             AND (e.event_types @> ARRAY[s.event_type] OR e.event_types @> '{*}')
             AND dispatcher_filter_passes(e.filter, s.payload::json)
             -- No channels on a line: endpoints listening to channels only skip it.
             AND e.channels IS NULL
        ELSE e.id = s.endpoint_id END
    -- Already final for that endpoint within the dedup window (in
    -- history, out of reach of webhook_live's unique index): nothing new.
    -- dispatcher_dedup_taken written out: a function holding subqueries
    -- is not inlined, and ran once per line and endpoint. The keys as an
    -- anti-join; history, only while the keys are not complete, behind
    -- the flag (an OR: evaluated per row, and not at all once complete).
    WHERE NOT EXISTS (SELECT 1 FROM dispatcher_dedup_keys k
                      WHERE k.event_id = s.event_id AND k.endpoint_id = e.id
                        AND k.expires_at > now())
      AND ((SELECT complete FROM dispatcher_dedup_seed)
           OR NOT EXISTS (SELECT 1 FROM webhook_history h
                          WHERE h.event_id = s.event_id AND h.endpoint_id = e.id
                            AND h.finished_at > dispatcher_dedup_since()))
), shared AS MATERIALIZED (
    SELECT line, nextval('event_payloads_id_seq') AS payload_id
    FROM target GROUP BY line HAVING count(*) > 1
), stored AS (
    INSERT INTO event_payloads (id, created_at, body)
    SELECT sh.payload_id, now(), s.payload::json
    FROM shared sh JOIN dispatcher_stage s ON s.ctid = sh.line
), ins AS (
    INSERT INTO webhook_live (endpoint_id, event_id, event_type, payload, max_attempts,
                              order_key, payload_id, payload_at)
    SELECT t.endpoint_id, t.event_id, t.event_type,
           CASE WHEN sh.payload_id IS NULL THEN t.payload::json END, t.max_attempts,
           t.order_key, sh.payload_id, CASE WHEN sh.payload_id IS NOT NULL THEN now() END
    FROM target t LEFT JOIN shared sh ON sh.line = t.line
    ON CONFLICT (endpoint_id, event_id) DO NOTHING
    RETURNING 1
)
SELECT count(*) FROM ins;

-- name: enqueue_one
-- $6, $7: the producer's trace context (schema 024), or NULL.
SELECT CASE WHEN $5::text IS NULL
            THEN dispatcher_enqueue($1, $2::json, $3, $4, traceparent => $6::text,
                                    tracestate => $7::text)
            ELSE dispatcher_enqueue_app($5, $1, $2::json, $3, $4, traceparent => $6::text,
                                        tracestate => $7::text) END;

-- name: enqueue_scheduled
-- enqueue_one held or for later: the application is the caller's, or the
-- endpoint's, or the default (as dispatcher_enqueue decides it).
SELECT dispatcher_enqueue_app(
    coalesce($5::text, dispatcher_endpoint_app($4), 'default'),
    $1, $2::json, $3, $4,
    deliver_at => coalesce($6::timestamptz, now() + make_interval(secs => $7::float8)),
    hold => $8, traceparent => $9::text, tracestate => $10::text);

-- name: event_applications
-- By the (event_id, endpoint_id) unique index. $2 (a caller scoped to an
-- application): the operator's ops deliveries are no tenant's (018).
SELECT DISTINCT e.application_id FROM webhook_queue q JOIN endpoints e ON e.id = q.endpoint_id
WHERE q.event_id = $1 AND (NOT $2::boolean OR e.ops_scope IS DISTINCT FROM 'operator')
ORDER BY 1;

-- name: release_event
SELECT dispatcher_release_event($1, $2);

-- name: cancel_event
SELECT dispatcher_cancel_event($1, $2, $3);

-- name: enqueue_message
-- The deliveries reference the message's payload (svix_message_insert):
-- one copy for the message and all its endpoints.
SELECT dispatcher_enqueue_app($1, $2, $3::json, $4, channels => $5::text[],
                              deliver_at => $6::timestamptz, traceparent => $7::text,
                              tracestate => $8::text, payload_id => m.payload_id,
                              payload_at => m.payload_at)
FROM (SELECT NULL) one
LEFT JOIN messages m ON m.application_id = $1 AND m.id = $4;

-- name: health_summary
WITH last_hour AS MATERIALIZED (
    SELECT delivered, delivered_ms, dead FROM endpoint_minutes
    WHERE minute > now() - interval '1 hour'
)
SELECT
    count(*) FILTER (WHERE status = 'pending') AS pending,
    count(*) FILTER (WHERE status = 'failed') AS awaiting_retry,
    count(*) FILTER (WHERE status = 'in_flight') AS in_flight,
    -- History's dead letters are counted as they come and go (schema 029);
    -- live holds some only until an upgrade's backfill has moved them.
    dispatcher_count('dead_letters') + count(*) FILTER (WHERE status = 'dead_letter')
        AS dead_letter,
    -- The last hour's outcomes from the endpoints' minutes (schema 020),
    -- not from a count of history; rows retrying come from the live queue.
    (SELECT coalesce(sum(delivered), 0) FROM last_hour) AS delivered_last_hour,
    count(*) FILTER (WHERE status = 'failed' AND updated_at > now() - interval '1 hour')
        + (SELECT coalesce(sum(dead), 0) FROM last_hour) AS failed_last_hour,
    -- A row delayed by its producer (deliver_at) is not late before it is due.
    min(created_at) FILTER (WHERE status IN ('failed', 'in_flight')
                                  OR (status = 'pending' AND next_attempt_at <= now()))
        AS oldest_pending,
    (SELECT sum(delivered_ms)::float8 / nullif(sum(delivered), 0) FROM last_hour)
        AS avg_delivery_ms_last_hour,
    -- The workers: those beating (within 10 s) and those that stopped
    -- (lost their database, or died: their rows come back after the lease).
    (SELECT count(*) FROM dispatcher_workers
      WHERE heartbeat_at > now() - interval '10 seconds') AS workers_live,
    (SELECT count(*) FROM dispatcher_workers
      WHERE heartbeat_at <= now() - interval '10 seconds') AS workers_silent,
    (SELECT coalesce(sum(outcomes_waiting), 0) FROM dispatcher_workers)::bigint
        AS outcomes_waiting,
    -- webhook_queue_held_idx (013): no scan of the queue.
    (SELECT count(*) FROM webhook_live WHERE status = 'held') AS held
FROM webhook_live
WHERE status IN ('pending', 'failed', 'in_flight', 'dead_letter');

-- name: refresh_percentiles
-- p50/p95/p99 and the last hour's figures per endpoint, from the window's
-- minutes (schema/functions/latency.sql: a running window, moved forward).
SELECT dispatcher_refresh_percentiles($1);

-- name: roll_up_hours
-- Every hour that is over (five minutes on, for the last flushes to land)
-- and not rolled up yet, from its minutes, for all endpoints at once: what
-- the refresh reads instead of them. A minute written into an hour already
-- rolled up (an outcome written again long after a failover) counts in the
-- last-hour figures but not in the hour's row.
INSERT INTO endpoint_hours (endpoint_id, hour, attempts, answered_2xx, hist_b, hist_n)
SELECT endpoint_id, hour, sum(n)::int, coalesce(sum(ok), 0)::int,
       array_agg(b ORDER BY b), array_agg(n::int ORDER BY b)
FROM (
    SELECT m.endpoint_id, date_trunc('hour', m.minute) AS hour, u.b, sum(u.n) AS n,
           -- each minute's 2xx count once per minute, not once per bucket
           sum(m.answered_2xx) FILTER (WHERE u.k = 1) AS ok
    FROM endpoint_minutes m,
         unnest(m.hist_b, m.hist_n) WITH ORDINALITY AS u(b, n, k)
    WHERE m.minute >= coalesce((SELECT max(hour) FROM endpoint_hours) + interval '1 hour',
                               '-infinity')
      AND m.minute < date_trunc('hour', now() - interval '5 minutes')
    GROUP BY 1, 2, 3
) per_bucket
GROUP BY endpoint_id, hour
ON CONFLICT (endpoint_id, hour) DO NOTHING;

-- name: fold_counts
-- The counts' appended rows into one a count (schema 029).
SELECT dispatcher_fold_counts();

-- name: prune_minutes
-- Past the window (and the two hours the health figures read) with an
-- hour to spare for the window's first hour, read as minutes: no figure's.
WITH gone AS (
    DELETE FROM endpoint_minutes
    WHERE minute < now() - make_interval(secs => greatest($1::float8, 7200) + 3600)
)
DELETE FROM endpoint_hours
WHERE hour < now() - make_interval(secs => $1::float8 + 3600);

-- name: day_partitions
-- The partitions of a time-partitioned table ($1), $4 s wide, from the one
-- holding $5 (NULL: now; the upgrade's backfill passes its rows' earliest)
-- to $2 ahead, made; those past its retention ($3 s; NULL keeps them)
-- dropped, and none made (schema/functions/partitions.sql).
SELECT created, dropped FROM dispatcher_day_partitions($1, $2, $3, $4, $5);

-- name: day_partitions_since
-- The partitions of $1 ($3 s wide) from the one holding $4 to now, but none
-- past its retention ($2 s): where the rows moved into history by the
-- upgrade's backfill land.
SELECT created, dropped FROM dispatcher_day_partitions($1, 0, $2, $3, $4);

-- name: prune_messages
-- Svix-API messages past retention, but never one a delivery is still to
-- be made for (a held or retrying row shows its message).
DELETE FROM messages
WHERE ctid = ANY (ARRAY(
    SELECT m.ctid FROM messages m
    WHERE m.created_at < now() - make_interval(secs => $1)
      AND NOT EXISTS (SELECT 1 FROM webhook_live q
                      WHERE q.event_id = m.id
                        AND q.status IN ('pending', 'failed', 'in_flight', 'held'))
    LIMIT $2));

-- name: prune_transitions
DELETE FROM breaker_transitions
WHERE ctid = ANY (ARRAY(
    SELECT ctid FROM breaker_transitions WHERE at < now() - make_interval(secs => $1)
    LIMIT $2));

-- name: endpoint_health_report
-- The last hour's attempts and 2xx share as of the last percentile refresh
-- (a dashboard polls this: it must not count an hour of samples each time).
SELECT e.id AS endpoint_id, e.application_id AS app, e.name, e.url, e.enabled, h.state,
       h.consecutive_failures, h.failure_threshold, h.opened_at, h.cooldown_seconds,
       h.p50_ms, h.p95_ms, h.p99_ms, h.sample_count, h.last_failure_at, h.last_success_at,
       e.max_in_flight, e.rate_per_s, e.burst, h.attempts_last_hour,
       round(h.successes_last_hour::numeric / nullif(h.attempts_last_hour, 0), 4)::float8
           AS success_rate_last_hour
FROM endpoints e JOIN endpoint_health h ON h.endpoint_id = e.id
WHERE e.deleted_at IS NULL AND e.kind = 'webhook' AND ($1::text IS NULL OR e.application_id = $1)
ORDER BY e.id;

-- name: dead_letters_by_endpoint
-- Counted, not listed (schema 030): the span's whole five-minute buckets
-- (folded, and the deltas not folded yet), and one by one the dead letters
-- of its first, partial five minutes and those the live queue still holds
-- (a row made dead by an edit, before its trigger moves it). Then per
-- endpoint: its letters per time, per status code and per error. Bounded
-- by the buckets in the span, not by the letters (1 M dead letters a
-- week: 150-300 ms when each was read).
-- success_share: how the endpoint answered its attempts over the span its
-- letters died in (its minutes, schema 020: bounded by the span, not by
-- the traffic): a flaky endpoint is told apart from one that was down.
WITH letters AS (
    SELECT endpoint_id, bucket AS at, last_status_code, last_error, n, attempts
    FROM dead_letter_buckets
    WHERE bucket >= dispatcher_dead_whole_from(now() - make_interval(secs => $1))
    UNION ALL
    SELECT endpoint_id, bucket, last_status_code, last_error, n, attempts
    FROM dead_letter_deltas
    WHERE bucket >= dispatcher_dead_whole_from(now() - make_interval(secs => $1))
    UNION ALL
    SELECT endpoint_id, updated_at, last_status_code, last_error, 1, attempt_count
    FROM webhook_history
    WHERE status = 'dead_letter' AND finished_at > now() - make_interval(secs => $1)
      AND finished_at < dispatcher_dead_whole_from(now() - make_interval(secs => $1))
      -- The buckets go by updated_at (a dead letter's finished_at, unless
      -- a hand edit made them differ); finished_at prunes the partitions.
      AND updated_at > now() - make_interval(secs => $1)
      AND updated_at < dispatcher_dead_whole_from(now() - make_interval(secs => $1))
    UNION ALL
    SELECT endpoint_id, updated_at, last_status_code, last_error, 1, attempt_count
    FROM webhook_live
    WHERE status = 'dead_letter' AND updated_at > now() - make_interval(secs => $1)
), by_time AS (
    -- A bucket a replay emptied (n 0 until the fold) says nothing.
    SELECT endpoint_id, at, sum(n)::bigint AS n, sum(attempts) AS attempts
    FROM letters GROUP BY endpoint_id, at HAVING sum(n) > 0
), by_code AS (
    SELECT endpoint_id, last_status_code AS code, sum(n)::bigint AS n
    FROM letters WHERE last_status_code IS NOT NULL
    GROUP BY endpoint_id, last_status_code HAVING sum(n) > 0
), by_error AS (
    SELECT endpoint_id, last_error AS error, sum(n)::bigint AS n
    FROM letters WHERE last_error IS NOT NULL
    GROUP BY endpoint_id, last_error HAVING sum(n) > 0
), per_endpoint AS (
    SELECT endpoint_id, sum(n)::bigint AS dead, (sum(attempts) / sum(n))::float8 AS avg_attempts,
           array_agg(extract(epoch FROM at)::float8 ORDER BY at) AS times,
           array_agg(n ORDER BY at) AS time_counts
    FROM by_time GROUP BY endpoint_id
), codes AS (
    -- Most frequent first; ties to the lowest code, as mode() did.
    SELECT endpoint_id, array_agg(code ORDER BY n DESC, code) AS codes,
           array_agg(n ORDER BY n DESC, code) AS code_counts
    FROM by_code GROUP BY endpoint_id
), errors AS (
    SELECT DISTINCT ON (endpoint_id) endpoint_id, error AS primary_error
    FROM by_error ORDER BY endpoint_id, n DESC, error
)
SELECT d.*, f.first_at, f.last_at, c.codes[1] AS primary_status_code, coalesce(c.codes, '{}') AS codes,
       coalesce(c.code_counts, '{}') AS code_counts, r.primary_error,
       (SELECT e.application_id FROM endpoints e WHERE e.id = d.endpoint_id) AS app,
       (SELECT sum(m.answered_2xx)::float8 / nullif(sum(m.attempts), 0)
        FROM endpoint_minutes m
        WHERE m.endpoint_id = d.endpoint_id
          AND m.minute BETWEEN date_trunc('minute', f.first_at) AND f.last_at) AS success_share
FROM per_endpoint d
-- The first and last letter, exact whatever a replay took from a bucket:
-- each from an index, history's by its span's days.
CROSS JOIN LATERAL (
    SELECT least((SELECT min(updated_at) FROM webhook_history
                  WHERE status = 'dead_letter' AND endpoint_id = d.endpoint_id
                    AND finished_at > now() - make_interval(secs => $1)
                    AND updated_at > now() - make_interval(secs => $1)),
                 (SELECT min(updated_at) FROM webhook_live
                  WHERE status = 'dead_letter' AND endpoint_id = d.endpoint_id
                    AND updated_at > now() - make_interval(secs => $1))) AS first_at,
           greatest((SELECT max(updated_at) FROM webhook_history
                     WHERE status = 'dead_letter' AND endpoint_id = d.endpoint_id
                       AND finished_at > now() - make_interval(secs => $1)
                       AND updated_at > now() - make_interval(secs => $1)),
                    (SELECT max(updated_at) FROM webhook_live
                     WHERE status = 'dead_letter' AND endpoint_id = d.endpoint_id
                       AND updated_at > now() - make_interval(secs => $1))) AS last_at
) f
LEFT JOIN codes c USING (endpoint_id)
LEFT JOIN errors r USING (endpoint_id)
-- Counts a hand edit put out of step with the letters (a row changed in
-- place, a leaf written directly) name no letter: left out, not a crash.
WHERE f.first_at IS NOT NULL
ORDER BY d.endpoint_id;

-- name: replay_ids
-- Back to the live queue, due now (dispatcher_revive, schema 026).
SELECT dispatcher_revive(ARRAY(
    SELECT q.id FROM webhook_queue q
    WHERE q.id = ANY($1::bigint[]) AND q.status = 'dead_letter'
      -- Erased (022) or expired (025): nothing left to send.
      AND q.payload IS NOT NULL
      -- A deleted endpoint's dead letters stay dead: nothing would send them.
      -- An application's token replays only its own, never the operator's ops
      -- deliveries (018), whatever its application is called.
      AND q.endpoint_id IN (SELECT id FROM endpoints WHERE deleted_at IS NULL
                            AND ($2::text IS NULL
                                 OR (application_id = $2
                                     AND ops_scope IS DISTINCT FROM 'operator')))),
    '{dead_letter}', false) AS id;

-- name: replay_endpoint
-- Capped: the oldest dead letters first, at most $4 per call.
SELECT dispatcher_revive(ARRAY(
    SELECT q.id FROM webhook_queue q
    WHERE q.endpoint_id = $1 AND q.status = 'dead_letter' AND q.payload IS NOT NULL
      AND ($2::timestamptz IS NULL OR q.updated_at >= $2)
      AND ($3::timestamptz IS NULL OR q.updated_at < $3)
    ORDER BY q.updated_at, q.id
    LIMIT $4), '{dead_letter}', false) AS id;

-- name: set_dedup_window
-- The workers' DISPATCHER_DEDUP_WINDOW_S, where the enqueue functions read
-- it (schema 026); written only when it changed.
INSERT INTO dispatcher_settings (dedup_window_s) VALUES ($1)
ON CONFLICT (one_row) DO UPDATE SET dedup_window_s = excluded.dedup_window_s
WHERE dispatcher_settings.dedup_window_s IS DISTINCT FROM excluded.dedup_window_s;

-- name: backfill_history
-- One step of the move of the rows final before schema 026 into history
-- (schema/functions/history.sql); NULL once it is done.
SELECT dispatcher_backfill_history($1, $2, $3, $4);

-- name: rotate_dedup_keys
-- The dedup window's oldest leaf emptied and made current when its keys
-- are past the window (schema/functions/history.sql).
SELECT dispatcher_rotate_dedup_keys();

-- name: seed_dedup_keys
-- One step ($1 s of finished_at) of the keys of rows history held before
-- schema 027; NULL once they are complete.
SELECT dispatcher_seed_dedup_keys($1);

-- name: backfill_days
-- The history partitions the next step of the move needs: per final
-- status, the earliest finished_at of its next $1 ids.
SELECT w.status, min(dispatcher_finished_at(w.status, w.delivered_at, w.updated_at)) AS since
FROM dispatcher_history_backfill b
CROSS JOIN LATERAL (SELECT * FROM webhook_live l WHERE l.id > b.cursor AND l.id <= b.upto
                    ORDER BY l.id LIMIT $1) w
WHERE b.done_at IS NULL AND w.status IN ('delivered', 'dead_letter', 'cancelled')
GROUP BY w.status;

-- name: prune_partition_rows
-- What no partition drop of $1 takes past its retention ($2 s), given the
-- width partitions are made with now ($3 s): at most $4 rows a partition.
SELECT dispatcher_prune_partition_rows($1, $2, $3, $4);

-- name: notify_due
SELECT pg_notify('dispatcher_due', '');

-- name: wake_mode
-- The wake-up switch (schema 016); no row reads as the default.
SELECT coalesce(s.wake, 'probe') AS wake, s.updated_at
FROM (SELECT 1) AS one LEFT JOIN dispatcher_settings s ON true;

-- name: set_wake_mode
INSERT INTO dispatcher_settings (wake) VALUES ($1)
ON CONFLICT (one_row) DO UPDATE SET wake = excluded.wake, updated_at = now()
RETURNING wake, updated_at;

-- name: wake_workers
-- NOTIFY dispatcher_due if the switch says `notify` (schema 016).
SELECT dispatcher_wake_workers();

-- name: deliveries_for_event
SELECT id, endpoint_id, event_id, event_type, status, attempt_count, max_attempts,
       created_at, next_attempt_at, delivered_at, last_error, last_status_code,
       last_response_ms
FROM webhook_queue
WHERE event_id = $1
  AND ($2::text IS NULL
       OR endpoint_id IN (SELECT id FROM endpoints WHERE application_id = $2
                                     AND ops_scope IS DISTINCT FROM 'operator'))
ORDER BY id;

-- name: recent_deliveries
-- Newest first, of one application (or all), optionally of one status and
-- one endpoint: the portal's deliveries list.
SELECT id, endpoint_id, event_id, event_type, status, attempt_count, max_attempts,
       created_at, next_attempt_at, delivered_at, last_error, last_status_code,
       last_response_ms
FROM webhook_queue
WHERE ($1::text IS NULL
       OR endpoint_id IN (SELECT id FROM endpoints WHERE application_id = $1
                                     AND ops_scope IS DISTINCT FROM 'operator'))
  AND ($2::text IS NULL OR status = $2)
  AND ($3::bigint IS NULL OR endpoint_id = $3)
ORDER BY id DESC
LIMIT $4;

-- name: alert_inputs
SELECT
    -- Letters that died in each hour, from the endpoints' minutes (020).
    (SELECT coalesce(sum(dead), 0) FROM endpoint_minutes
      WHERE minute > now() - interval '1 hour') AS dead_last_hour,
    (SELECT coalesce(sum(dead), 0) FROM endpoint_minutes
      WHERE minute <= now() - interval '1 hour'
        AND minute > now() - interval '2 hours') AS dead_prev_hour,
    (SELECT extract(epoch FROM now() - min(created_at))::float8 FROM webhook_live
      WHERE status IN ('pending', 'failed', 'in_flight')
        AND (status <> 'pending' OR next_attempt_at <= now())) AS oldest_pending_age_s,
    (SELECT max(retry_cap_ms)::float8 / 1000 FROM endpoints) AS retry_window_s;

-- name: metrics_view
SELECT
    (SELECT count(*) FROM webhook_live WHERE status = 'pending') AS pending,
    (SELECT count(*) FROM webhook_live WHERE status = 'failed') AS failed,
    (SELECT count(*) FROM webhook_live WHERE status = 'in_flight') AS in_flight,
    dispatcher_count('dead_letters')  -- as health_summary
        + (SELECT count(*) FROM webhook_live WHERE status = 'dead_letter') AS dead_letter,
    (SELECT extract(epoch FROM now() - min(created_at))::float8 FROM webhook_live
      WHERE status IN ('pending', 'failed', 'in_flight')
        AND (status <> 'pending' OR next_attempt_at <= now())) AS oldest_pending_s,
    -- Any session of the server holding a snapshot (backend_xmin) and any
    -- prepared transaction: each keeps vacuum from removing dead rows in
    -- every database. This statement's own session is not one of them.
    (SELECT extract(epoch FROM now() - min(t))::float8 FROM (
        SELECT coalesce(xact_start, query_start) AS t FROM pg_stat_activity
        WHERE backend_xmin IS NOT NULL AND pid <> pg_backend_pid()
        UNION ALL
        SELECT prepared FROM pg_prepared_xacts) x) AS oldest_xmin_s,
    (SELECT count(*) FILTER (WHERE h.state = 'closed') FROM endpoint_health h
      JOIN endpoints e ON e.id = h.endpoint_id AND e.deleted_at IS NULL) AS closed,
    (SELECT count(*) FILTER (WHERE h.state = 'open') FROM endpoint_health h
      JOIN endpoints e ON e.id = h.endpoint_id AND e.deleted_at IS NULL) AS open,
    (SELECT count(*) FILTER (WHERE h.state = 'half_open') FROM endpoint_health h
      JOIN endpoints e ON e.id = h.endpoint_id AND e.deleted_at IS NULL) AS half_open;

-- name: dead_letters_list
SELECT id, endpoint_id, event_id, event_type, attempt_count, created_at, updated_at AS dead_at,
       last_error, last_status_code, last_response_ms, payload IS NULL AS payload_expired
FROM webhook_queue
WHERE status = 'dead_letter' AND ($1::bigint IS NULL OR endpoint_id = $1)
  AND ($3::text IS NULL
       OR endpoint_id IN (SELECT id FROM endpoints WHERE application_id = $3
                                     AND ops_scope IS DISTINCT FROM 'operator'))
ORDER BY updated_at DESC, id DESC
LIMIT $2;

-- name: attempts_for_event
SELECT l.delivery_id, l.measured_at AS at, l.status_code, l.response_ms, l.error,
       l.detail::text AS detail
FROM webhook_queue w
JOIN endpoint_latency l ON l.delivery_id = w.id
WHERE w.event_id = $1
  AND ($2::text IS NULL
       OR w.endpoint_id IN (SELECT id FROM endpoints WHERE application_id = $2
                                     AND ops_scope IS DISTINCT FROM 'operator'))
ORDER BY l.delivery_id, l.measured_at;

-- name: browse_deliveries
-- The deliveries browser (GET /v1/deliveries): newest first by id (ids are
-- handed out in creation order), $8 the cursor (the last id of the page
-- before). Without an endpoint or event id this walks the primary key
-- backwards and stops at the page's end; an endpoint (or an application's
-- few endpoints) walks webhook_queue_browse_idx (schema 014) instead, so
-- a quiet endpoint's page does not read the busy ones' rows; an event id,
-- the unique (event_id, endpoint_id) index. An application's rows include
-- those of its deleted endpoints: they are still its history.
SELECT q.id, q.endpoint_id, e.application_id AS app, q.event_id, q.event_type, q.status,
       q.attempt_count, q.max_attempts, q.created_at, q.next_attempt_at, q.delivered_at,
       q.updated_at, q.last_error, q.last_status_code, q.last_response_ms,
       q.payload IS NULL AS payload_expired
FROM webhook_queue q JOIN endpoints e ON e.id = q.endpoint_id
WHERE ($1::text IS NULL OR (e.application_id = $1 AND e.ops_scope IS DISTINCT FROM 'operator'))
  AND ($2::text IS NULL OR q.status = $2)
  AND ($3::bigint IS NULL OR q.endpoint_id = $3)
  AND ($4::text IS NULL OR q.event_type = $4)
  AND ($5::text IS NULL OR q.event_id = $5)
  AND ($6::timestamptz IS NULL OR q.created_at >= $6)
  AND ($7::timestamptz IS NULL OR q.created_at < $7)
  AND ($8::bigint IS NULL OR q.id < $8)
ORDER BY q.id DESC
LIMIT $9;

-- name: get_delivery
-- One delivery with its payload, of one application ($2: never the
-- operator's ops deliveries, which are no tenant's, 018) or any.
SELECT q.id, q.endpoint_id, e.application_id AS app, q.event_id, q.event_type, q.status,
       q.attempt_count, q.max_attempts, q.created_at, q.next_attempt_at, q.delivered_at,
       q.updated_at, q.last_error, q.last_status_code, q.last_response_ms,
       q.payload IS NULL AS payload_expired, q.payload::text AS payload
FROM webhook_queue q JOIN endpoints e ON e.id = q.endpoint_id
WHERE q.id = $1
  AND ($2::text IS NULL OR (e.application_id = $2 AND e.ops_scope IS DISTINCT FROM 'operator'));

-- name: attempts_for_delivery
-- Through the (endpoint_id, measured_at) index from the row's creation on:
-- the delivery_id BRIN alone would read every block range it overlaps.
SELECT l.delivery_id, l.measured_at AS at, l.status_code, l.response_ms, l.error,
       l.detail::text AS detail
FROM endpoint_latency l
WHERE l.endpoint_id = $2 AND l.delivery_id = $1 AND l.measured_at >= $3
ORDER BY l.measured_at;

-- name: dead_letters_page
-- Dead letters newest first, as dead_letters_list, continuing after the
-- cursor ($4, $5: the dead_at and id of the last row of the page before).
SELECT id, endpoint_id, event_id, event_type, attempt_count, created_at, updated_at AS dead_at,
       last_error, last_status_code, last_response_ms, payload IS NULL AS payload_expired
FROM webhook_queue
WHERE status = 'dead_letter' AND ($1::bigint IS NULL OR endpoint_id = $1)
  AND ($3::text IS NULL
       OR endpoint_id IN (SELECT id FROM endpoints WHERE application_id = $3
                                     AND ops_scope IS DISTINCT FROM 'operator'))
  AND ($4::timestamptz IS NULL OR (updated_at, id) < ($4, $5::bigint))
ORDER BY updated_at DESC, id DESC
LIMIT $2;

-- name: replay_since
-- "Resend everything that failed since": every live endpoint's dead letters
-- (of one application, or all) that died in [$2, $3), oldest first, at
-- most $4 per call, through the dead-letter index per endpoint.
SELECT dispatcher_revive(ARRAY(
    SELECT q.id FROM webhook_queue q
    WHERE q.status = 'dead_letter' AND q.updated_at >= $2 AND q.payload IS NOT NULL
      AND ($3::timestamptz IS NULL OR q.updated_at < $3)
      AND q.endpoint_id IN (SELECT id FROM endpoints WHERE deleted_at IS NULL
                            AND ($1::text IS NULL
                                 OR (application_id = $1
                                     AND ops_scope IS DISTINCT FROM 'operator')))
    ORDER BY q.updated_at, q.id
    LIMIT $4), '{dead_letter}', false) AS id;

-- name: update_endpoint
-- The service merges a patch over the locked current row and validates the
-- whole result; every setting is written back.
UPDATE endpoints SET
    url = $2, event_types = $3, rate_per_s = $4, burst = $5, max_in_flight = $6,
    timeout_ms = $7, max_attempts = $8, retry_base_ms = $9, retry_cap_ms = $10,
    failure_threshold = $11, cooldown_s = $12, name = $13, description = $14,
    method = $15, body = $16, success_body = $17, filter = $18::jsonb, ordering = $19,
    ordering_key = $20, client_cert = $21, client_key = $22, macro_style = $23,
    value_map = $24::jsonb, disable_after = $25, disable_within_s = $26, headers = $27::jsonb,
    updated_at = now()
WHERE id = $1
RETURNING *;

-- name: timeline
-- Enqueued and finished (delivered / dead) per bucket over the last $1::float8
-- seconds: each a range of an index by time, so its cost follows the
-- span's traffic, not the history's. History (schema 026) by its
-- partition key, finished_at (at or after creation: the span's partitions
-- only); webhook_live by its BRIN on created_at, and for the rows final
-- before 026 not yet moved, its delivered and dead-letter indexes (021).
-- $3: the span's start by the caller's clock less a margin, a bound the
-- planner can read; with the exact bounds alone (on now(), unknown when
-- planning) it estimated a third of every partition, scanned today's
-- whole and spent seconds compiling the plan with JIT.
WITH span AS MATERIALIZED (
    SELECT now() - make_interval(secs => $1::float8) AS since
), buckets AS (
    SELECT generate_series(0, ($1::float8 / $2::float8)::int - 1) AS i
), created AS (
    SELECT floor(extract(epoch FROM now() - c.at) / $2::float8)::int AS i, count(*) AS n
    FROM (SELECT created_at AS at FROM webhook_live WHERE created_at > $3::timestamptz
          UNION ALL
          SELECT created_at FROM webhook_history
          WHERE finished_at > $3::timestamptz AND created_at > $3::timestamptz) c
    WHERE c.at > (SELECT since FROM span)
    GROUP BY 1
), finished AS (
    SELECT floor(extract(epoch FROM now() - f.at) / $2::float8)::int AS i,
           count(*) FILTER (WHERE f.status = 'delivered') AS delivered,
           count(*) FILTER (WHERE f.status = 'dead_letter') AS dead
    FROM (SELECT status, dispatcher_finished_at(status, delivered_at, updated_at) AS at
          FROM webhook_live
          WHERE (status = 'delivered' AND delivered_at > $3::timestamptz)
             OR (status = 'dead_letter' AND updated_at > $3::timestamptz)
          UNION ALL
          SELECT status, finished_at FROM webhook_history
          WHERE status IN ('delivered', 'dead_letter') AND finished_at > $3::timestamptz) f
    WHERE f.at > (SELECT since FROM span)
    GROUP BY 1
)
SELECT b.i AS ago, coalesce(c.n, 0) AS enqueued, coalesce(f.delivered, 0) AS delivered,
       coalesce(f.dead, 0) AS dead
FROM buckets b
LEFT JOIN created c USING (i) LEFT JOIN finished f USING (i)
ORDER BY b.i DESC;

-- name: heartbeat
-- Registers this worker (with what it holds and the membership whose shares
-- it keeps to, schema 017) and returns the other live workers with theirs,
-- in a stable order. The INSERT is not visible to the SELECT (one
-- snapshot): the caller counts itself.
WITH me AS (
    INSERT INTO dispatcher_workers
        (worker_id, host, pid, in_flight, outcomes_waiting, applied_members)
    VALUES ($1, $2, $3, $5, $6, $7)
    ON CONFLICT (worker_id) DO UPDATE
    SET heartbeat_at = now(), in_flight = $5, outcomes_waiting = $6, applied_members = $7
), gone AS (
    DELETE FROM dispatcher_workers WHERE heartbeat_at < now() - interval '5 minutes'
)
SELECT worker_id, applied_members FROM dispatcher_workers
WHERE heartbeat_at > now() - make_interval(secs => $4) AND worker_id <> $1
ORDER BY 1;

-- name: leave
DELETE FROM dispatcher_workers WHERE worker_id = $1;

-- name: pause_endpoints
UPDATE endpoint_health h
SET paused_until = greatest(h.paused_until, now() + make_interval(secs => p.wait_s))
FROM unnest($1::bigint[], $2::float8[]) AS p(endpoint_id, wait_s)
WHERE h.endpoint_id = p.endpoint_id;

-- name: status_counts
SELECT status, count(*) AS n FROM webhook_queue GROUP BY status;

-- name: breaker_transitions
SELECT endpoint_id, from_state, to_state, cooldown_seconds, at
FROM breaker_transitions ORDER BY at OFFSET $1;

-- name: live_delivery_count
SELECT count(*) FROM webhook_live
WHERE endpoint_id = $1 AND status IN ('pending', 'failed', 'in_flight');

-- name: dead_letter_endpoint
-- Deleting an endpoint with --force: what it still had queued dies, with
-- the reason, before the endpoint goes.
UPDATE webhook_live
SET status = 'dead_letter', last_error = 'endpoint deleted', locked_by = NULL, updated_at = now()
WHERE endpoint_id = $1 AND status IN ('pending', 'failed', 'in_flight')
RETURNING id;

-- name: delete_endpoint
UPDATE endpoints
SET deleted_at = now(), enabled = false, disabled_reason = 'deleted', updated_at = now()
WHERE id = $1 AND deleted_at IS NULL
RETURNING *;

-- name: endpoint_latency_timeline
-- One endpoint's attempts per bucket over the last $2 seconds (buckets of
-- $3 seconds, oldest first): exact percentiles and failures, from the
-- (endpoint_id, measured_at) index range.
WITH buckets AS (
    SELECT generate_series(0, ($2::float8 / $3::float8)::int - 1) AS i
), s AS (
    SELECT floor(extract(epoch FROM now() - measured_at) / $3::float8)::int AS i,
           percentile_cont(0.50) WITHIN GROUP (ORDER BY response_ms) AS p50_ms,
           percentile_cont(0.95) WITHIN GROUP (ORDER BY response_ms) AS p95_ms,
           percentile_cont(0.99) WITHIN GROUP (ORDER BY response_ms) AS p99_ms,
           count(*) AS attempts,
           count(*) FILTER (WHERE error IS NOT NULL OR status_code IS NULL
                                  OR status_code NOT BETWEEN 200 AND 299) AS failures
    FROM endpoint_latency
    WHERE endpoint_id = $1 AND measured_at > now() - make_interval(secs => $2::float8)
    GROUP BY 1
)
SELECT b.i AS ago, s.p50_ms, s.p95_ms, s.p99_ms,
       coalesce(s.attempts, 0) AS attempts, coalesce(s.failures, 0) AS failures
FROM buckets b LEFT JOIN s USING (i)
ORDER BY b.i DESC;

-- name: endpoint_transitions
SELECT from_state, to_state, cooldown_seconds, at
FROM breaker_transitions WHERE endpoint_id = $1
ORDER BY at DESC LIMIT $2;

-- name: endpoint_recent_failures
-- The newest failed attempts of one endpoint within the window, with the
-- event each belonged to (a pruned delivery leaves its attempt without one).
SELECT l.delivery_id, w.event_id, w.event_type, l.measured_at AS at, l.status_code,
       l.response_ms, l.error
FROM endpoint_latency l LEFT JOIN webhook_queue w ON w.id = l.delivery_id
WHERE l.endpoint_id = $1 AND l.measured_at > now() - make_interval(secs => $2::float8)
  AND (l.error IS NOT NULL OR l.status_code IS NULL OR l.status_code NOT BETWEEN 200 AND 299)
ORDER BY l.measured_at DESC
LIMIT $3;

-- name: newest_id
-- The live queue's newest id: rows that moved to history need no wake.
SELECT coalesce(max(id), 0) FROM webhook_live;

-- name: probe_new_rows
-- The idle probe: the live rows above a watermark the prober keeps about a
-- second behind the newest id, as a count and a sum of 64-bit hashes of
-- their ids: a commit of new rows changes it, whatever order producers
-- commit in; claims and retries (updates) do not. A row moving to history
-- changes it too (a wake for nothing: one claim), and never hides an
-- insert: a new id would have to hash to exactly what left. Live rows
-- only (schema 026's history, asked "for the last hour", locked every leaf
-- at each probe: 1 ms, a hundred times a second, growing with retention).
-- A range scan of the primary key, as long as the rows of the last second.
SELECT count(*)::bigint AS n, coalesce(max(id), $1) AS top,
       coalesce(sum(hashint8extended(id, 0)), 0)::text AS sig
FROM webhook_live WHERE id > $1;

-- name: table_health
-- The hot tables' dead rows, whether autovacuum will see to them (the
-- server's settings and the table's own), and when they were last vacuumed.
SELECT s.relname AS table, s.n_live_tup AS live, s.n_dead_tup AS dead,
       current_setting('autovacuum') = 'on' AND current_setting('track_counts') = 'on'
           AND NOT coalesce('autovacuum_enabled=false' = ANY (c.reloptions), false)
           AS autovacuum_on,
       extract(epoch FROM now() - greatest(s.last_vacuum, s.last_autovacuum))::float8
           AS since_vacuum_s,
       pg_total_relation_size(s.relid) AS total_bytes,
       s.vacuum_count, s.autovacuum_count
FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid
WHERE s.relname = ANY ($1::text[]) AND s.schemaname = current_schema()
ORDER BY s.relname;

-- ---------------------------------------------------------------- applications

-- name: insert_application
INSERT INTO applications (id, name) VALUES ($1, $2)
ON CONFLICT (id) DO NOTHING
RETURNING id, name, created_at;

-- name: list_applications
-- With each one's quotas, live endpoints and queue depth (pending,
-- retrying, in flight), counted from the claim index per endpoint.
SELECT a.id, a.name, a.created_at, a.max_endpoints, a.max_events_per_s,
       (SELECT count(*) FROM endpoints e
        WHERE e.application_id = a.id AND e.deleted_at IS NULL AND e.kind = 'webhook')
           AS endpoints,
       (SELECT count(*) FROM endpoints e JOIN webhook_live q ON q.endpoint_id = e.id
        WHERE e.application_id = a.id AND q.status IN ('pending', 'failed', 'in_flight'))
           AS queue_depth
FROM applications a
WHERE ($1::text IS NULL OR a.id = $1) AND a.deleted_at IS NULL
ORDER BY a.id;

-- name: update_application
-- $2: a new name or NULL; $3 / $5: whether max_endpoints / max_events_per_s
-- change, to $4 / $6 (NULL: no quota). The events bucket stays as it is:
-- its level is capped by the new capacity when next read.
UPDATE applications SET
    name = coalesce($2, name),
    max_endpoints = CASE WHEN $3::boolean THEN $4::integer ELSE max_endpoints END,
    max_events_per_s = CASE WHEN $5::boolean THEN $6::float8 ELSE max_events_per_s END
WHERE id = $1
RETURNING id, name, max_endpoints, max_events_per_s;

-- name: lock_endpoint_quota
-- Held until the endpoint's insert commits, so that two concurrent creates
-- of one application count each other. NO KEY UPDATE: the inserts' own
-- foreign-key checks (KEY SHARE) do not wait on it.
SELECT max_endpoints FROM applications WHERE id = $1 AND deleted_at IS NULL FOR NO KEY UPDATE;

-- name: live_endpoint_count
-- What max_endpoints counts: endpoints and the application's own ops
-- webhooks (issue 32: each is a delivery per change); the operator's,
-- kept in default, are no application's.
SELECT count(*) FROM endpoints
WHERE application_id = $1 AND deleted_at IS NULL
  AND (kind = 'webhook' OR (kind = 'ops' AND ops_scope = 'app'));

-- name: take_event_tokens
-- The events quota (schema 009): $2 tokens from the bucket of application
-- $1 (NULL: as dispatcher_enqueue decides, the application of endpoint $3
-- or the default), in one UPDATE whose row lock makes concurrent takes, of
-- any process, wait for each other and then re-read the level. A take
-- larger than the bucket's capacity waits for a full bucket and leaves it
-- in debt, so the average rate holds. No row: no quota (or no such
-- application), and nothing was written. Refused: the seconds until enough
-- tokens, as of this statement's snapshot (advice, not a promise).
WITH app AS (
    SELECT coalesce($1::text, dispatcher_endpoint_app($3::bigint), 'default') AS id
), took AS (
    UPDATE applications
    SET event_tokens = dispatcher_bucket_level(event_tokens, event_tokens_at, max_events_per_s)
                       - $2::float8,
        event_tokens_at = greatest(event_tokens_at, statement_timestamp())
    WHERE id = (SELECT id FROM app) AND max_events_per_s IS NOT NULL
      AND dispatcher_bucket_level(event_tokens, event_tokens_at, max_events_per_s)
          >= least($2, greatest(1, max_events_per_s))
    RETURNING true AS granted, 0::float8 AS wait_s
)
SELECT granted, wait_s FROM took
UNION ALL
SELECT false, (least($2, greatest(1, max_events_per_s))
               - dispatcher_bucket_level(event_tokens, event_tokens_at, max_events_per_s))
              / max_events_per_s
FROM applications
WHERE id = (SELECT id FROM app) AND max_events_per_s IS NOT NULL
  AND NOT EXISTS (SELECT FROM took);

-- name: take_test_shot
-- The test-shot lease of application $1 (schema 019) for $2 seconds, if no
-- live one is there: concurrent takes wait on the row lock and re-read it,
-- so one wins. Returns the lease's end and, when refused, the seconds left
-- on the one that is out.
WITH took AS (
    UPDATE applications SET test_shot_until = statement_timestamp() + make_interval(secs => $2)
    WHERE id = $1 AND (test_shot_until IS NULL OR test_shot_until <= statement_timestamp())
    RETURNING test_shot_until
)
SELECT (SELECT test_shot_until FROM took) AS lease,
       (SELECT extract(epoch FROM test_shot_until - statement_timestamp())::float8
        FROM applications WHERE id = $1) AS wait_s;

-- name: end_test_shot
-- Only the lease this shot took: one that expired and was taken again stays.
UPDATE applications SET test_shot_until = NULL WHERE id = $1 AND test_shot_until = $2;

-- name: insert_token
INSERT INTO application_tokens (application_id, token_hash, expires_at)
SELECT $1, $2, CASE WHEN $3::float8 IS NULL THEN NULL
                    ELSE now() + make_interval(secs => $3) END
WHERE EXISTS (SELECT 1 FROM applications WHERE id = $1)
RETURNING expires_at;

-- name: token_application
-- The application a token acts for, if it is live (neither expired nor revoked).
SELECT application_id, token_hash,
       revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now()) AS live
FROM application_tokens WHERE token_hash = $1;

-- name: revoke_token
UPDATE application_tokens SET revoked_at = coalesce(revoked_at, now())
WHERE token_hash = $1
RETURNING application_id, revoked_at;

-- name: insert_portal_code
-- $4: the digest of the application token that asks (NULL: the operator).
-- Such a code records the token, expires no later than it, and is not made
-- at all unless the token is live and of this application (018).
INSERT INTO portal_codes (code_hash, application_id, expires_at, token_id)
SELECT $1, a.id, least(now() + make_interval(secs => $3), t.expires_at), t.id
FROM applications a
LEFT JOIN application_tokens t ON t.token_hash = $4 AND t.application_id = a.id
WHERE a.id = $2
  AND ($4::bytea IS NULL OR (t.id IS NOT NULL AND t.revoked_at IS NULL AND (t.expires_at IS NULL OR t.expires_at > now())))
RETURNING expires_at;

-- name: use_portal_code
-- Once: the first caller marks it used; a second, or a late one, gets
-- nothing; nor does one whose minting token was revoked or expired (018).
UPDATE portal_codes c SET used_at = now()
WHERE c.code_hash = $1 AND c.used_at IS NULL AND c.expires_at > now()
  AND (c.token_id IS NULL
       OR EXISTS (SELECT 1 FROM application_tokens t WHERE t.id = c.token_id
                  AND t.revoked_at IS NULL AND (t.expires_at IS NULL OR t.expires_at > now())))
RETURNING c.application_id, c.code_hash, c.token_id;

-- name: insert_portal_session
-- $4: the token that minted the code it was opened with, if any: the
-- session ends no later than that token (018).
INSERT INTO portal_sessions (session_hash, application_id, expires_at, token_id)
SELECT $1, $2,
       least(now() + make_interval(secs => $3),
             (SELECT expires_at FROM application_tokens WHERE id = $4)),
       $4;

-- name: portal_session_application
-- A session whose code's minting token was revoked (or expired) is over.
SELECT s.application_id, s.session_hash FROM portal_sessions s
LEFT JOIN application_tokens t ON t.id = s.token_id
WHERE s.session_hash = $1 AND s.expires_at > now()
  AND (s.token_id IS NULL OR (t.revoked_at IS NULL AND (t.expires_at IS NULL OR t.expires_at > now())));

-- name: delete_portal_session
DELETE FROM portal_sessions WHERE session_hash = $1;

-- name: revoke_portal
-- `app revoke-portal`: every code and session of the application gone; the
-- counts are of those that could still have signed in or acted.
WITH codes AS (
    DELETE FROM portal_codes WHERE application_id = $1
    RETURNING used_at IS NULL AND expires_at > now() AS live
), sessions AS (
    DELETE FROM portal_sessions WHERE application_id = $1
    RETURNING expires_at > now() AS live
)
SELECT (SELECT count(*) FROM codes WHERE live) AS codes,
       (SELECT count(*) FROM sessions WHERE live) AS sessions
FROM applications WHERE id = $1;

-- name: prune_portal
-- Expired sessions and codes, $1 seconds after they expired (by
-- maintenance, and when a session opens).
WITH s AS (DELETE FROM portal_sessions WHERE expires_at < now() - make_interval(secs => $1))
DELETE FROM portal_codes WHERE expires_at < now() - make_interval(secs => $1);

-- ---------------------------------------------------------------- the Svix-compatible API (012)

-- name: svix_app_get
-- By id or by the caller's uid.
SELECT id, uid, name, metadata, created_at, updated_at FROM applications
WHERE (id = $1 OR uid = $1) AND deleted_at IS NULL
ORDER BY (id = $1) DESC LIMIT 1;

-- name: svix_app_list
SELECT id, uid, name, metadata, created_at, updated_at FROM applications
WHERE ($1::text IS NULL OR id > $1) AND ($3::text IS NULL OR id = $3) AND deleted_at IS NULL
ORDER BY id LIMIT $2;

-- name: svix_app_insert
INSERT INTO applications (id, name, uid, metadata) VALUES ($1, $2, $3, $4::jsonb)
ON CONFLICT DO NOTHING
RETURNING id, uid, name, metadata, created_at, updated_at;

-- name: svix_app_update
UPDATE applications SET
    name = coalesce($2, name),
    uid = CASE WHEN $3 THEN $4 ELSE uid END,
    metadata = coalesce($5::jsonb, metadata),
    updated_at = now()
WHERE id = $1
RETURNING id, uid, name, metadata, created_at, updated_at;

-- name: svix_app_live_endpoints
SELECT id FROM endpoints WHERE application_id = $1 AND deleted_at IS NULL AND kind = 'webhook'
ORDER BY id;

-- name: svix_app_delete
-- Its endpoints were deleted first (the service's rule); what still refers
-- to the application goes with it.
WITH gone_tokens AS (DELETE FROM application_tokens WHERE application_id = $1),
     gone_codes AS (DELETE FROM portal_codes WHERE application_id = $1),
     gone_sessions AS (DELETE FROM portal_sessions WHERE application_id = $1)
UPDATE applications SET uid = NULL, deleted_at = now() WHERE id = $1 AND deleted_at IS NULL
RETURNING id;

-- name: svix_endpoint_extras
SELECT id, uid, metadata, channels FROM endpoints WHERE id = ANY($1::bigint[]);

-- name: svix_endpoint_set_extras
UPDATE endpoints SET
    uid = CASE WHEN $2 THEN $3 ELSE uid END,
    metadata = coalesce($4::jsonb, metadata),
    channels = CASE WHEN $5 THEN $6::text[] ELSE channels END
WHERE id = $1 AND deleted_at IS NULL
RETURNING id;

-- name: svix_endpoint_resolve
SELECT id FROM endpoints
WHERE application_id = $1 AND deleted_at IS NULL AND kind = 'webhook'
  AND (id = (CASE WHEN $2 ~ '^[0-9]{1,18}$' THEN $2::bigint END) OR uid = $2)
LIMIT 1;

-- name: svix_endpoint_ids
SELECT id FROM endpoints
WHERE application_id = $1 AND deleted_at IS NULL AND kind = 'webhook'
  AND ($2::bigint IS NULL OR id > $2)
ORDER BY id LIMIT $3;

-- name: svix_message_insert
-- The body goes to the payload store once (schema 025); the message and
-- its deliveries (enqueue_message) reference it. A message id taken stores
-- nothing: the payload row is written only when the message row is.
WITH msg AS (
    INSERT INTO messages (application_id, id, event_id, event_type, channels, tags, deliver_at,
                          payload_id, payload_at)
    VALUES ($1, $2, $3, $4, $6, $7, $8, nextval('event_payloads_id_seq'), now())
    ON CONFLICT DO NOTHING
    RETURNING id, event_id, event_type, channels, tags, deliver_at, created_at,
              payload_id, payload_at
), stored AS (
    INSERT INTO event_payloads (id, created_at, body)
    SELECT payload_id, payload_at, $5::json FROM msg
)
SELECT id, event_id, event_type, $5::json AS payload, channels, tags, deliver_at, created_at
FROM msg;

-- name: svix_message_get
-- A message sent through the Svix API, else an event enqueued another way,
-- answered from one of its deliveries.
(SELECT m.id, m.event_id, m.event_type, b.payload, m.channels, m.tags, m.deliver_at,
        m.created_at, b.payload IS NULL AS payload_expired
 FROM messages m
 CROSS JOIN LATERAL (SELECT dispatcher_payload(m.payload, m.payload_id, m.payload_at)
                         AS payload) b
 WHERE m.application_id = $1 AND m.id = $2)
UNION ALL
(SELECT q.event_id AS id, q.event_id, q.event_type, q.payload, NULL::text[], NULL::text[],
        NULL::timestamptz, q.created_at, q.payload IS NULL
 FROM webhook_queue q JOIN endpoints e ON e.id = q.endpoint_id
 WHERE q.event_id = $2 AND e.application_id = $1 AND e.kind = 'webhook'
 ORDER BY q.id LIMIT 1)
LIMIT 1;

-- name: svix_message_list
-- Newest first; $2/$3: the iterator (created_at, id) to continue after.
-- The payloads of the page's messages only.
SELECT m.id, m.event_id, m.event_type, b.payload, m.channels, m.tags, m.deliver_at,
       m.created_at, b.payload IS NULL AS payload_expired
FROM (SELECT * FROM messages
      WHERE application_id = $1
        AND ($2::timestamptz IS NULL OR (created_at, id) < ($2, $3::text))
        AND ($5::text[] IS NULL OR event_type = ANY($5))
        AND ($6::text IS NULL OR $6 = ANY(channels))
      ORDER BY created_at DESC, id DESC LIMIT $4) m
CROSS JOIN LATERAL (SELECT dispatcher_payload(m.payload, m.payload_id, m.payload_at) AS payload) b
ORDER BY m.created_at DESC, m.id DESC;

-- name: svix_attempts
-- Newest first; by message ($2) or by endpoint ($3); $4/$5: the iterator.
SELECT q.id AS delivery_id, q.event_id, q.endpoint_id, e.url, l.measured_at,
       l.status_code, l.response_ms, l.error, q.resent_at,
       l.detail->>'response_excerpt' AS excerpt
FROM webhook_queue q
JOIN endpoints e ON e.id = q.endpoint_id
JOIN endpoint_latency l ON l.delivery_id = q.id AND l.endpoint_id = q.endpoint_id
WHERE e.application_id = $1 AND e.kind = 'webhook'
  AND ($2::text IS NULL OR q.event_id = $2)
  AND ($3::bigint IS NULL OR q.endpoint_id = $3)
  AND ($4::timestamptz IS NULL OR (l.measured_at, q.id) < ($4, $5::bigint))
ORDER BY l.measured_at DESC, q.id DESC LIMIT $6;

-- name: svix_resend
-- A delivery sent again now with a fresh attempt budget (Svix: a manual
-- attempt), back from history to the live queue (schema 026); a row still
-- waiting is left as it is.
SELECT dispatcher_revive(ARRAY(
    SELECT q.id FROM webhook_queue q
    WHERE q.event_id = $1 AND q.endpoint_id = $2 AND q.status IN ('delivered', 'dead_letter')
      AND q.payload IS NOT NULL), '{delivered,dead_letter}', true) AS id;

-- name: svix_mark_resent
UPDATE webhook_live SET resent_at = now() WHERE event_id = $1 AND endpoint_id = $2;

-- name: idempotency_claim
INSERT INTO idempotency_keys (scope, key, request_hash) VALUES ($1, $2, $3)
ON CONFLICT DO NOTHING RETURNING 1;

-- name: idempotency_get
SELECT request_hash, status, body, created_at < now() - interval '24 hours' AS expired
FROM idempotency_keys WHERE scope = $1 AND key = $2;

-- name: idempotency_finish
UPDATE idempotency_keys SET status = $3, body = $4 WHERE scope = $1 AND key = $2;

-- name: idempotency_release
DELETE FROM idempotency_keys WHERE scope = $1 AND key = $2 AND status IS NULL;

-- name: idempotency_expire
DELETE FROM idempotency_keys WHERE scope = $1 AND key = $2
  AND created_at < now() - interval '24 hours';

-- name: idempotency_prune
-- By maintenance, a bounded batch a round, like the latency samples.
DELETE FROM idempotency_keys
WHERE ctid = ANY (ARRAY(
    SELECT ctid FROM idempotency_keys WHERE created_at < now() - make_interval(secs => $2)
    LIMIT $1));

-- ---------------------------------------------------------------- event types (db/eventtypes.py)

-- name: insert_event_type
-- A name taken in that scope inserts nothing (and answers no row).
INSERT INTO event_types (application_id, name, description, schemas, feature_flag)
VALUES ($1, $2, $3, $4::jsonb, $5)
ON CONFLICT ON CONSTRAINT event_types_scope_name DO NOTHING
RETURNING application_id AS app, name, description, schemas::text AS schemas,
          archived_at, feature_flag, created_at, updated_at;

-- name: count_event_types
-- An application's own types, archived ones included (its limit counts rows).
SELECT count(*) FROM event_types WHERE application_id = $1;

-- name: list_event_types
-- What one scope sees: the catalogue-wide types and, with an application,
-- its own; by name (then catalogue-wide first), a page after the name $4.
SELECT application_id AS app, name, description, schemas::text AS schemas,
       archived_at, feature_flag, created_at, updated_at
FROM event_types
WHERE (application_id IS NULL OR application_id = $1)
  AND ($2 OR archived_at IS NULL)
  AND ($4::text IS NULL OR name > $4)
ORDER BY name, application_id NULLS FIRST
LIMIT $3;

-- name: get_event_type
-- A read resolves a name as the enqueue check does: the application's own
-- type, else the catalogue-wide one (event_types_scope_name: by name, then
-- at most two rows).
SELECT application_id AS app, name, description, schemas::text AS schemas,
       archived_at, feature_flag, created_at, updated_at
FROM event_types
WHERE name = $2 AND (application_id IS NULL OR application_id = $1)
ORDER BY application_id NULLS LAST
LIMIT 1;

-- name: update_event_type
-- A write addresses exactly one scope. clock_timestamp(), not now(): the
-- validators' cache is keyed by updated_at, which must change with every
-- update, even two in one transaction.
UPDATE event_types SET
    description  = CASE WHEN $3 THEN $4 ELSE description END,
    schemas      = CASE WHEN $5 THEN $6::jsonb ELSE schemas END,
    feature_flag = CASE WHEN $7 THEN $8 ELSE feature_flag END,
    archived_at  = CASE WHEN NOT $9 THEN archived_at
                        WHEN $10 THEN coalesce(archived_at, clock_timestamp()) END,
    updated_at   = clock_timestamp()
WHERE name = $2 AND application_id IS NOT DISTINCT FROM $1
RETURNING application_id AS app, name, description, schemas::text AS schemas,
          archived_at, feature_flag, created_at, updated_at;

-- name: expunge_event_type
DELETE FROM event_types WHERE name = $2 AND application_id IS NOT DISTINCT FROM $1
RETURNING application_id AS app, name, description, schemas::text AS schemas,
          archived_at, feature_flag, created_at, updated_at;

-- name: event_type_for_enqueue
-- The one lookup an enqueue pays (an index probe by name): the type its
-- events are checked against, in the application the event goes to ($2, or
-- the endpoint $3's, or default, as dispatcher_enqueue decides). The schema
-- comes back as text and is parsed only when the caller's cached
-- validator is stale.
SELECT application_id AS app, updated_at, archived_at IS NOT NULL AS archived,
       dispatcher_latest_schema(schemas)::text AS schema
FROM event_types
WHERE name = $1
  AND (application_id IS NULL
       OR application_id = coalesce($2, dispatcher_endpoint_app($3), 'default'))
ORDER BY application_id NULLS LAST
LIMIT 1;
-- ---------------------------------------------------------------- operational webhooks

-- name: ops_emit
-- Operational events, a batch in one statement (schema 011): the recorder
-- runs it in its flush's transaction, the service in the change's.
SELECT dispatcher_ops_emit($1::text[], $2::bigint[], $3::bigint[], $4::jsonb[]);

-- name: insert_ops_webhook
-- $5: the application (default for the operator's), $6: its scope.
INSERT INTO endpoints (url, secret, event_types, description, application_id, kind, ops_scope)
VALUES ($1, $2, $3, $4, $5, 'ops', $6)
RETURNING *;

-- name: list_ops_webhooks
-- $1: one application's; $2: the operator's only; neither: all.
SELECT * FROM endpoints
WHERE kind = 'ops' AND deleted_at IS NULL
  AND ($1::text IS NULL OR (ops_scope = 'app' AND application_id = $1))
  AND (NOT $2::boolean OR ops_scope = 'operator')
ORDER BY id;

-- name: get_ops_webhook
SELECT * FROM endpoints WHERE id = $1 AND kind = 'ops' AND deleted_at IS NULL;

-- name: update_ops_webhook
UPDATE endpoints
SET url = $2, event_types = $3, description = $4, enabled = $5,
    disabled_reason = CASE WHEN $5 THEN NULL ELSE coalesce(disabled_reason, 'disabled by user') END,
    updated_at = now()
WHERE id = $1 AND kind = 'ops' AND deleted_at IS NULL
RETURNING *;

-- name: delete_ops_webhook
-- What it still had queued dies with it (nothing would send it), then the
-- row is deleted softly like an endpoint's: in-flight outcomes still land.
WITH dead AS (
    UPDATE webhook_live
    SET status = 'dead_letter', last_error = 'endpoint deleted', locked_by = NULL,
        updated_at = now()
    WHERE endpoint_id = $1 AND status IN ('pending', 'failed', 'in_flight')
      AND EXISTS (SELECT 1 FROM endpoints
                  WHERE id = $1 AND kind = 'ops' AND deleted_at IS NULL)
)
UPDATE endpoints
SET deleted_at = now(), enabled = false, disabled_reason = 'deleted', updated_at = now()
WHERE id = $1 AND kind = 'ops' AND deleted_at IS NULL
RETURNING *;

-- name: app_ops_webhooks_wanting
-- How many of application $1's own ops webhooks an operational event of
-- type $2 reaches (as dispatcher_ops_emit picks them, schema 011): the
-- deliveries a tenant's change costs its events quota.
SELECT count(*) FROM endpoints
WHERE kind = 'ops' AND ops_scope = 'app' AND application_id = $1
  AND deleted_at IS NULL AND enabled
  AND (event_types @> ARRAY[$2::text] OR event_types @> '{*}');

-- name: expire_held
-- A held row no one released in 366 days (the furthest deliver_at allows)
-- goes to dead letter with its reason, a batch at a time: nothing waits
-- forever, and the operator can still replay it (webhook_queue_held_idx).
UPDATE webhook_live
SET status = 'dead_letter', last_error = 'held past 366 days: never released',
    locked_by = NULL, updated_at = now()
WHERE id IN (SELECT id FROM webhook_live
             WHERE status = 'held' AND created_at < now() - interval '366 days'
             LIMIT $1 FOR UPDATE SKIP LOCKED);

-- name: expire_unread_polls
-- A polling endpoint's delivery its consumer has not read within the
-- delivered rows' retention ($1 s since it came due) goes to dead letter,
-- as a delivered one would go from history: nothing waits unread forever,
-- and a replay puts it back in front of the consumer. A range of the due
-- index per polling endpoint, bounded by the batch ($2).
UPDATE webhook_live
SET status = 'dead_letter', last_error = 'unread: not fetched within the retention',
    locked_by = NULL, updated_at = now()
WHERE id IN (SELECT w.id FROM endpoints e
             JOIN webhook_live w ON w.endpoint_id = e.id
             WHERE e.url = 'poll:' AND w.status IN ('pending', 'failed')
               AND w.next_attempt_at < now() - make_interval(secs => $1)
             LIMIT $2 FOR UPDATE OF w SKIP LOCKED);

-- name: erase_expired_payloads
-- Payload retention (schema 022) of the final rows kept longer than their
-- payloads ($1 s): they keep their row and lose the payload they hold
-- inline, a bounded batch ($2) of each history status a round. (A
-- payload in the store goes with its day, schema 025.)
WITH expired AS (
    SELECT h.id, h.status, h.finished_at FROM webhook_history h
    WHERE h.payload IS NOT NULL AND h.created_at < now() - make_interval(secs => $1)
    LIMIT $2
)
UPDATE webhook_history h SET payload = NULL, payload_erased_at = now()
FROM expired x
WHERE h.id = x.id AND h.status = x.status AND h.finished_at = x.finished_at;

-- name: erase_expired_message_payloads
-- Svix messages kept longer than their payloads: a bounded batch a round.
UPDATE messages SET payload = NULL, payload_erased_at = now()
WHERE ctid = ANY (ARRAY(
    SELECT ctid FROM messages
    WHERE created_at < now() - make_interval(secs => $1) AND payload IS NOT NULL
    LIMIT $2));

-- name: expunge_event
-- Erasure of one event's payload (SPEC "History, payloads and retention"):
-- every delivery of it in application $1 ($3 false: not the operator's
-- ops deliveries, which are no tenant's), through the (event_id,
-- endpoint_id) index, and its Svix message (dispatcher_erase_deliveries
-- says what happens to each row). The events erased: 0 or 1.
WITH hit AS MATERIALIZED (
    SELECT 1 FROM dispatcher_erase_deliveries(ARRAY(
        SELECT q.id FROM webhook_queue q JOIN endpoints e ON e.id = q.endpoint_id
        WHERE q.event_id = $2 AND e.application_id = $1
          AND ($3 OR e.ops_scope IS DISTINCT FROM 'operator')))
), msg AS MATERIALIZED (
    SELECT dispatcher_erase_message($1, $2) AS hit
)
-- A sum, not an OR: both sides must run (an OR may stop at the first).
SELECT ((SELECT count(*) FROM hit) + (SELECT count(*) FROM msg WHERE hit) > 0)::int
    AS expunged;

-- name: expunge_batch
-- Erasure in bulk, one bounded step: the deliveries with ids in ($1, $1 +
-- $2] of application $3 (NULL: every application, the operator's call,
-- its ops deliveries included) enqueued before $4 (NULL: any time) whose
-- payload has every top-level key of $5 (NULL: any payload) with an equal
-- value. Returns the events erased in the step (application, event id).
-- A range of ids, not a LIMIT: each step reads one stretch of the primary
-- key, whatever the filters leave of it.
SELECT DISTINCT e.application_id AS app, d.event_id
FROM dispatcher_erase_deliveries(ARRAY(
    SELECT q.id FROM webhook_queue q JOIN endpoints e ON e.id = q.endpoint_id
    WHERE q.id > $1 AND q.id <= $1 + $2 AND q.payload IS NOT NULL
      AND ($3::text IS NULL OR (e.application_id = $3 AND e.ops_scope IS DISTINCT FROM 'operator'))
      AND ($4::timestamptz IS NULL OR q.created_at < $4)
      AND ($5::jsonb IS NULL OR NOT EXISTS (
            SELECT 1 FROM jsonb_each($5::jsonb) c
            WHERE (q.payload::jsonb) -> c.key IS DISTINCT FROM c.value)))) AS d
JOIN endpoints e ON e.id = d.endpoint_id;

-- name: expunge_messages
-- The Svix messages the same request selects (bounded by their retention),
-- and how many are events not counted yet: none of their deliveries lost
-- its payload since the request began ($4).
WITH picked AS MATERIALIZED (
    SELECT m.application_id, m.id
    FROM messages m
    CROSS JOIN LATERAL (SELECT dispatcher_payload(m.payload, m.payload_id, m.payload_at)
                            AS payload) b
    WHERE b.payload IS NOT NULL
      AND ($1::text IS NULL OR m.application_id = $1)
      AND ($2::timestamptz IS NULL OR m.created_at < $2)
      AND ($3::jsonb IS NULL OR NOT EXISTS (
            SELECT 1 FROM jsonb_each($3::jsonb) c
            WHERE (b.payload::jsonb) -> c.key IS DISTINCT FROM c.value))
), hit AS MATERIALIZED (
    -- Only what was picked is erased (a condition's order in one WHERE
    -- is the planner's).
    SELECT application_id, id FROM picked WHERE dispatcher_erase_message(application_id, id)
)
SELECT count(*) FROM hit
WHERE NOT EXISTS (SELECT 1 FROM webhook_queue q JOIN endpoints e ON e.id = q.endpoint_id
                  WHERE q.event_id = hit.id AND e.application_id = hit.application_id
                    AND q.payload_erased_at >= $4);

-- name: erasure_start
-- Where a bulk erasure's walk ends (the newest delivery now) and when it
-- began (what expunge_messages compares with).
SELECT coalesce((SELECT max(id) FROM webhook_queue), 0) AS newest, clock_timestamp() AS began;

-- name: poll_newest
-- The newest id taken so far (taken, not necessarily committed), read
-- before poll_writers in a statement of its own.
SELECT last_value FROM webhook_queue_id_seq;

-- name: poll_writers
-- Whether another transaction may still commit a row of the live queue
-- (an INSERT, through the table or the webhook_queue view, holds ROW
-- EXCLUSIVE on what it names from before it takes its id until after its
-- commit is visible; a prepared transaction has no pid). None now: every
-- id up to poll_newest's, read before, is committed or gone by the page's
-- snapshot, taken after.
SELECT EXISTS (SELECT 1 FROM pg_locks l
               WHERE l.locktype = 'relation'
                 AND l.relation IN ('webhook_live'::regclass, 'webhook_queue'::regclass)
                 AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
                 AND l.mode = 'RowExclusiveLock' AND l.pid IS DISTINCT FROM pg_backend_pid());

-- name: poll_ack
-- A polling endpoint's consumer came back with a cursor: what the page that
-- gave it showed is delivered. The page showed every pending row due by
-- its cutoff ($3) up to its last id ($2), and nothing above it, so a row
-- not yet due then, or committed later below it, stays pending for the
-- next page (ops/polling.py).
UPDATE webhook_live
SET status = 'delivered', delivered_at = now(), updated_at = now(),
    attempt_count = attempt_count + 1, last_error = NULL, locked_by = NULL
WHERE endpoint_id = $1 AND status IN ('pending', 'failed') AND id <= $2
  AND next_attempt_at <= $3::timestamptz;

-- name: poll_page
-- The first pending rows due by the cutoff, now less the margin $3 (a
-- transaction that commits within the margin of its INSERT is seen in id
-- order), or now when no writer could still commit below what is seen
-- ($4, the newest id then; poll_writers), oldest id first, with the cutoff
-- for the cursor; of those, the ones that start within $5 bytes of
-- payload (the first always), and how many there were before that cut.
WITH page AS (
    SELECT q.id, q.event_id, q.event_type, q.created_at, q.payload::text AS payload, c.cutoff
    FROM webhook_queue q, (SELECT now() - make_interval(secs => $3) AS cutoff) c
    WHERE q.endpoint_id = $1 AND q.status IN ('pending', 'failed')
      AND q.next_attempt_at <= c.cutoff
      AND ($4::bigint IS NULL OR q.id <= $4)
    ORDER BY q.id
    LIMIT $2
), sized AS (
    SELECT page.*, sum(coalesce(octet_length(payload), 0)) OVER (ORDER BY id) AS running,
           count(*) OVER () AS total
    FROM page
)
SELECT id, event_id, event_type, created_at, payload, cutoff, total
FROM sized
WHERE running - coalesce(octet_length(payload), 0) < $5
ORDER BY id;

-- name: endpoint_url
SELECT url FROM endpoints WHERE id = $1 AND deleted_at IS NULL AND kind = 'webhook';
