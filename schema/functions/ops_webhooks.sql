-- Operational webhooks (SPEC "Operational webhooks"): what the worker's
-- recorder calls to queue the signed events that tell the operator, and
-- each application for its own endpoints, what happens to endpoints. An
-- ops webhook is an endpoints row of kind 'ops' (schema 011), delivered by
-- the same pipeline as every other.
--
-- Functions here are defined once and edited in place: `dispatcher
-- migrate` re-applies this file when its text changes (CONTRIBUTING.md,
-- "Changing the schema").

-- ISO-8601 UTC with milliseconds, as Svix writes its timestamps.
CREATE OR REPLACE FUNCTION dispatcher_iso(p_at timestamptz) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT to_char(p_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
$$;

-- Operational events, a batch in one statement (the worker's recorder calls
-- it in the transaction that writes the outcomes behind them, so an event
-- is queued if and only if its cause was recorded). Event i is of type
-- p_types[i] about endpoint p_endpoints[i]; with p_deliveries[i], the
-- delivery it concerns (msgId and lastAttempt come from its row as just
-- written); p_extra[i] is merged into data. One delivery per ops webhook
-- that wants it: the operator's, and the subject's application's,
-- subscribed to the type or to everything. Each event gets a fresh id,
-- shared by its deliveries (the same webhook-id at every receiver).
--
-- An event about an ops webhook itself is dropped here (the join on kind
-- 'webhook'): an ops webhook failing never produces ops events, so they
-- cannot loop. Returns the deliveries queued.
CREATE OR REPLACE FUNCTION dispatcher_ops_emit(
    p_types text[],
    p_endpoints bigint[],
    p_deliveries bigint[] DEFAULT NULL,
    p_extra jsonb[] DEFAULT NULL
) RETURNS integer
LANGUAGE sql AS $$
    WITH ev AS MATERIALIZED (
        SELECT x.type, e.application_id AS app,
               'msg_' || replace(gen_random_uuid()::text, '-', '') AS msg_id,
               jsonb_build_object('appId', e.application_id, 'endpointId', e.id::text)
               || CASE WHEN q.id IS NULL THEN '{}'::jsonb
                       ELSE jsonb_build_object(
                           'msgId', q.event_id,
                           'lastAttempt', jsonb_build_object(
                               'timestamp', dispatcher_iso(q.updated_at),
                               'responseStatusCode', q.last_status_code))
                  END
               || coalesce(x.extra, '{}'::jsonb) AS data
        FROM unnest(p_types, p_endpoints,
                    coalesce(p_deliveries, array_fill(NULL::bigint, ARRAY[cardinality(p_types)])),
                    coalesce(p_extra, array_fill(NULL::jsonb, ARRAY[cardinality(p_types)])))
            AS x(type, endpoint_id, delivery_id, extra)
        JOIN endpoints e ON e.id = x.endpoint_id AND e.kind = 'webhook'
        -- The delivery, live or just moved to history (schema 026).
        LEFT JOIN webhook_queue q ON q.id = x.delivery_id
    ), ins AS (
        INSERT INTO webhook_live (endpoint_id, event_id, event_type, payload, max_attempts)
        SELECT o.id, ev.msg_id, ev.type,
               json_build_object('type', ev.type, 'timestamp', dispatcher_iso(now()),
                                 'data', ev.data),
               o.max_attempts
        FROM ev
        JOIN endpoints o ON o.kind = 'ops' AND o.deleted_at IS NULL AND o.enabled
             AND (o.ops_scope = 'operator' OR o.application_id = ev.app)
             AND (o.event_types @> ARRAY[ev.type] OR o.event_types @> '{*}')
        ON CONFLICT (endpoint_id, event_id) DO NOTHING
        RETURNING 1
    )
    SELECT count(*)::integer FROM ins
$$;
