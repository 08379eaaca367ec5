-- Operational webhooks (SPEC "Operational webhooks"): the operator, and each
-- application for its own endpoints, is told what happens to endpoints as
-- signed webhooks through the same pipeline.
--
-- An ops webhook is an endpoints row of kind 'ops', so that the worker's
-- gates, breaker, signing, retries and latency samples apply to it
-- unchanged; everything that lists, counts or fans out to endpoints asks
-- for kind 'webhook'. ops_scope says whose it is: 'operator' (it lives in
-- application default and hears about every application's endpoints) or
-- 'app' (it hears about its own application's only).
--
-- What this costs on a live system: two columns with constant defaults
-- (catalog only, no rewrite of endpoints) and their checks, validated by
-- one scan of endpoints under its ACCESS EXCLUSIVE lock (milliseconds for
-- thousands of endpoints); webhook_queue is not touched.
ALTER TABLE endpoints
    ADD COLUMN kind text NOT NULL DEFAULT 'webhook' CHECK (kind IN ('webhook', 'ops')),
    ADD COLUMN ops_scope text CHECK (ops_scope IN ('operator', 'app')),
    ADD CONSTRAINT endpoints_ops_scope CHECK ((kind = 'ops') = (ops_scope IS NOT NULL));

-- The emission's only read of endpoints by kind: a few rows at most.
CREATE INDEX endpoints_ops_idx ON endpoints (application_id)
    WHERE kind = 'ops' AND deleted_at IS NULL;

-- ISO-8601 UTC with milliseconds, as Svix writes its timestamps.
CREATE FUNCTION dispatcher_iso(p_at timestamptz) RETURNS text
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
CREATE FUNCTION dispatcher_ops_emit(
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
        LEFT JOIN webhook_queue q ON q.id = x.delivery_id
    ), ins AS (
        INSERT INTO webhook_queue (endpoint_id, event_id, event_type, payload, max_attempts)
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

-- dispatcher_enqueue_app as in 008, its targets of kind 'webhook' only: a
-- producer's events never reach an ops webhook, by subscription or by id.
CREATE OR REPLACE FUNCTION dispatcher_enqueue_app(
    p_app text,
    p_event_type text,
    p_payload json,
    p_event_id text DEFAULT NULL,
    p_endpoint_id bigint DEFAULT NULL
) RETURNS bigint[]
LANGUAGE plpgsql AS $$
DECLARE
    v_event_id text := coalesce(p_event_id, 'evt_' || replace(gen_random_uuid()::text, '-', ''));
    v_ids bigint[];
    v_new boolean;
    v_targets bigint;
BEGIN
    PERFORM dispatcher_check_event(p_event_type, v_event_id, p_payload);
    WITH target AS MATERIALIZED (
        SELECT e.id, e.max_attempts,
               dispatcher_order_key(e.ordering, e.ordering_key, p_payload) AS order_key
        FROM endpoints e
        WHERE e.deleted_at IS NULL AND e.application_id = p_app AND e.kind = 'webhook'
          AND CASE WHEN p_endpoint_id IS NULL
                   THEN e.enabled AND (e.event_types @> ARRAY[p_event_type] OR e.event_types @> '{*}')
                        AND dispatcher_filter_passes(e.filter, p_payload)
                   ELSE e.id = p_endpoint_id END
    ), ins AS (
        INSERT INTO webhook_queue (endpoint_id, event_id, event_type, payload, max_attempts,
                                   order_key)
        SELECT t.id, v_event_id, p_event_type, p_payload, t.max_attempts, t.order_key
        FROM target t
        ON CONFLICT (endpoint_id, event_id) DO NOTHING
        RETURNING id
    )
    SELECT coalesce(array_agg(id ORDER BY id), '{}'),
           (SELECT count(*) FROM target),
           count(*) = (SELECT count(*) FROM target)
           AND NOT (p_event_id IS NOT NULL
                    AND EXISTS (SELECT 1 FROM webhook_queue q
                                JOIN endpoints o ON o.id = q.endpoint_id
                                WHERE q.event_id = v_event_id AND o.application_id = p_app
                                  AND o.kind = 'webhook'))
    INTO v_ids, v_targets, v_new
    FROM ins;
    IF v_targets = 0 THEN
        IF NOT EXISTS (SELECT 1 FROM applications WHERE id = p_app) THEN
            RAISE EXCEPTION 'unknown application: %', p_app USING ERRCODE = '22023';
        END IF;
        IF p_endpoint_id IS NOT NULL AND EXISTS (
            SELECT 1 FROM endpoints WHERE id = p_endpoint_id AND deleted_at IS NULL
              AND kind = 'webhook' AND application_id <> p_app) THEN
            RAISE EXCEPTION 'endpoint % is not in application %', p_endpoint_id, p_app
                USING ERRCODE = '22023';
        END IF;
    END IF;
    IF v_new THEN
        RETURN v_ids;
    END IF;
    SELECT coalesce(array_agg(q.id ORDER BY q.id), '{}') INTO v_ids
    FROM webhook_queue q JOIN endpoints e ON e.id = q.endpoint_id
    WHERE q.event_id = v_event_id
      AND e.deleted_at IS NULL AND e.application_id = p_app AND e.kind = 'webhook'
      AND CASE WHEN p_endpoint_id IS NULL
               THEN e.event_types @> ARRAY[p_event_type] OR e.event_types @> '{*}'
               ELSE e.id = p_endpoint_id END;
    RETURN v_ids;
END $$;
