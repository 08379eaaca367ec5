-- The outbox's SQL interface: what producers call in their own
-- transactions to enqueue events (dispatcher_enqueue, dispatcher_enqueue_app)
-- and to release or cancel what they queued; the argument checks those
-- share; the wake-up of the workers (dispatcher_settings.wake, schema 016).
-- The HTTP API and the CLI enqueue through the same functions.
--
-- Functions here are defined once and edited in place: `dispatcher
-- migrate` re-applies this file when its text changes (CONTRIBUTING.md,
-- "Changing the schema").

-- The argument checks every enqueue makes, in one place: what is wrong
-- with the event, or NULL. One SQL expression, so that the enqueue's
-- plpgsql inlines it into a single test (a plpgsql call per event cost a
-- producer's transaction more than the checks themselves).
DROP FUNCTION IF EXISTS dispatcher_check_event(text, text, json);
CREATE FUNCTION dispatcher_check_event(p_event_type text, p_event_id text, p_payload json)
RETURNS text LANGUAGE sql STABLE AS $$
    SELECT CASE
        WHEN p_event_type IS NULL OR p_event_type = '' OR length(p_event_type) > 256
            THEN 'event_type must be 1..256 characters'
        WHEN length(p_event_id) NOT BETWEEN 1 AND 200 THEN 'event_id must be 1..200 characters'
        WHEN p_payload IS NULL THEN 'payload must not be null'
        WHEN octet_length(p_payload::text) >
             coalesce(nullif(current_setting('dispatcher.max_payload_bytes', true), '')::int, 262144)
            THEN 'payload is over the size limit'
    END
$$;

-- NOTIFY the workers when the switch says so: what every path that makes
-- rows due calls (dispatcher_enqueue_app below inlines the same test).
-- Identical notifications of one transaction fold into one, so a producer
-- that enqueues many events in one transaction still sends one.
CREATE OR REPLACE FUNCTION dispatcher_wake_workers() RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF (SELECT wake FROM dispatcher_settings) = 'notify' THEN
        PERFORM pg_notify('dispatcher_due', '');
    END IF;
END $$;

-- One application's event, fanned out: the function every enqueue path
-- ends in (the HTTP API's, the CLI's, dispatcher_enqueue's below), to the
-- event's targets (dispatcher_event_targets); p_endpoint_id must be the
-- application's. An event id is unique within the application (another
-- may use the same id for its own event): the same id again creates
-- nothing new and answers with the deliveries it has. The rows are due at
-- `deliver_at` (or now); with `hold` they are inserted `held` and wait for
-- dispatcher_release_event. One signature, so that callers naming the
-- arguments resolve.
--
-- A producer's transaction pays for every plan node and every plpgsql
-- expression the call sets up (perf under 16 producers: executor start-up
-- was the largest part of its cost), so the common case is two
-- statements. First the INSERT, for an event with exactly one target,
-- its payload inline (or the reference it was given). Anything else (no
-- target, several, or one that has the event already) reads the targets
-- again and inserts for them in one statement, with the payload written
-- once to the store for several (schema 025). Then, for an id the producer chose, one look at the dedup
-- window's keys and at whether the event has rows besides this call's: a
-- statement of its own, after the INSERT, so that its snapshot includes a
-- move to history that committed while the INSERT waited on the row
-- being moved (READ COMMITTED; at REPEATABLE READ that instant can let a
-- duplicate through: docs/operations/production.md). Rows besides this
-- call's (another endpoint's, a concurrent call's) send the answer to
-- the second lookup, which returns all the event's deliveries. An unknown
-- application raises and inserts nothing; it is looked up only when
-- nothing was targeted. Rows due now wake the workers when the switch
-- says so.
CREATE OR REPLACE FUNCTION dispatcher_enqueue_app(
    p_app text,
    p_event_type text,
    p_payload json,
    p_event_id text DEFAULT NULL,
    p_endpoint_id bigint DEFAULT NULL,
    channels text[] DEFAULT NULL,
    deliver_at timestamptz DEFAULT NULL,
    hold boolean DEFAULT false,
    traceparent text DEFAULT NULL,
    tracestate text DEFAULT NULL,
    payload_id bigint DEFAULT NULL,
    payload_at timestamptz DEFAULT NULL
) RETURNS bigint[]
LANGUAGE plpgsql AS $$
DECLARE
    v_event_id text := coalesce(p_event_id, 'evt_' || replace(gen_random_uuid()::text, '-', ''));
    v_traceparent text;
    v_tracestate text;
    v_targets bigint[];
    v_wake text;
    v_ids bigint[];  -- NULL while nothing is inserted
    v_dups bigint[];
    v_seen boolean;
    v_before boolean;
    -- The arguments that share a name with a column, by names that do not.
    v_channels ALIAS FOR channels;
    v_deliver_at ALIAS FOR deliver_at;
    v_hold ALIAS FOR hold;
    v_payload_id ALIAS FOR payload_id;
    v_payload_at ALIAS FOR payload_at;
BEGIN
    IF dispatcher_check_event(p_event_type, v_event_id, p_payload) IS NOT NULL THEN
        RAISE EXCEPTION '%', dispatcher_check_event(p_event_type, v_event_id, p_payload)
            USING ERRCODE = '22023';
    END IF;
    -- A W3C traceparent, else none (an invalid one is ignored, as W3C
    -- recommends); tracestate only with one, bounded as W3C bounds it.
    IF traceparent IS NOT NULL THEN
        v_traceparent := CASE
            WHEN traceparent ~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'
                 AND left(traceparent, 2) <> 'ff'
                 AND substr(traceparent, 4, 32) <> repeat('0', 32)
                 AND substr(traceparent, 37, 16) <> repeat('0', 16)
            THEN traceparent END;
        v_tracestate := CASE WHEN v_traceparent IS NOT NULL AND length(tracestate) <= 512
                             THEN nullif(tracestate, '') END;
    END IF;
    INSERT INTO webhook_live (endpoint_id, event_id, event_type, payload, max_attempts,
                              order_key, next_attempt_at, status, traceparent, tracestate,
                              payload_id, payload_at)
    SELECT t.id, v_event_id, p_event_type, CASE WHEN v_payload_id IS NULL THEN p_payload END,
           t.max_attempts, t.order_key, coalesce(v_deliver_at, now()),
           CASE WHEN v_hold THEN 'held' ELSE 'pending' END, v_traceparent, v_tracestate,
           v_payload_id, v_payload_at
    FROM (SELECT t.*, count(*) OVER () AS n
          FROM dispatcher_event_targets(p_app, p_event_type, p_payload, p_endpoint_id,
                                        v_channels) t) t
    WHERE t.n = 1
    ON CONFLICT (endpoint_id, event_id) DO NOTHING
    RETURNING ARRAY[id], ARRAY[endpoint_id], (SELECT wake FROM dispatcher_settings)
    INTO v_ids, v_targets, v_wake;
    IF v_ids IS NULL THEN
        -- The targets read again, in this statement's snapshot: the
        -- endpoints may have changed since the INSERT's (one of two
        -- disabled meanwhile leaves one to send to).
        WITH target AS MATERIALIZED (
            SELECT * FROM dispatcher_event_targets(p_app, p_event_type, p_payload,
                                                   p_endpoint_id, v_channels)
        ), stored AS (
            -- One copy per event: a fan-out's rows reference the store.
            -- Nothing is stored for a repeat of an event a target has
            -- already (the rows new to it, if any, then keep the payload
            -- inline: never without).
            INSERT INTO event_payloads (body)
            SELECT p_payload
            WHERE v_payload_id IS NULL AND (SELECT count(*) FROM target) > 1
              AND NOT (p_event_id IS NOT NULL AND EXISTS (
                    SELECT 1 FROM webhook_live q JOIN target t ON t.id = q.endpoint_id
                    WHERE q.event_id = v_event_id))
            RETURNING id, created_at
        ), ref AS (
            SELECT id, created_at FROM stored
            UNION ALL
            SELECT v_payload_id, v_payload_at WHERE v_payload_id IS NOT NULL
        ), ins AS (
            INSERT INTO webhook_live (endpoint_id, event_id, event_type, payload, max_attempts,
                                      order_key, next_attempt_at, status, traceparent,
                                      tracestate, payload_id, payload_at)
            SELECT t.id, v_event_id, p_event_type, CASE WHEN r.id IS NULL THEN p_payload END,
                   t.max_attempts, t.order_key, coalesce(v_deliver_at, now()),
                   CASE WHEN v_hold THEN 'held' ELSE 'pending' END, v_traceparent,
                   v_tracestate, r.id, r.created_at
            FROM target t LEFT JOIN ref r ON true
            ON CONFLICT (endpoint_id, event_id) DO NOTHING
            RETURNING id
        )
        SELECT (SELECT array_agg(id) FROM target), (SELECT array_agg(id ORDER BY id) FROM ins),
               (SELECT wake FROM dispatcher_settings)
        INTO v_targets, v_ids, v_wake;
    END IF;
    -- A generated id cannot repeat. For the producer's own: the same event
    -- for the same endpoint, final within the dedup window (in history, out
    -- of reach of webhook_live's unique index), has the rows just inserted
    -- for it go again, unseen. One probe of the window's keys (schema 027,
    -- history.sql) for the event and its targets; history itself is asked
    -- only while the keys of what it held before 027 are being written,
    -- and the rows are looked at only when a probe finds one. Rows of the
    -- event besides this call's, of this application's webhooks, mean it
    -- was sent before: asked first of any application's rows (no join),
    -- and of this one's only when there are some.
    IF p_event_id IS NOT NULL THEN
        SELECT v_ids IS NOT NULL
               AND (EXISTS (SELECT 1 FROM dispatcher_dedup_keys_0 k
                            WHERE k.event_id = v_event_id AND k.endpoint_id = ANY (v_targets)
                              AND k.expires_at > now())
                    OR EXISTS (SELECT 1 FROM dispatcher_dedup_keys_1 k
                               WHERE k.event_id = v_event_id AND k.endpoint_id = ANY (v_targets)
                                 AND k.expires_at > now())),
               EXISTS (SELECT 1 FROM webhook_live q
                       WHERE q.event_id = v_event_id AND q.id <> ALL (coalesce(v_ids, '{}')))
        INTO v_seen, v_before;
        IF v_before THEN
            v_before := EXISTS (SELECT 1 FROM webhook_live q
                                JOIN endpoints o ON o.id = q.endpoint_id
                                WHERE q.event_id = v_event_id
                                  AND q.id <> ALL (coalesce(v_ids, '{}'))
                                  AND o.application_id = p_app AND o.kind = 'webhook');
        END IF;
        -- Whether the keys are complete is remembered by the session once
        -- they are (they never stop being): no read of the flag then.
        IF v_seen OR (v_ids IS NOT NULL AND current_setting('dispatcher.dedup_keys_complete', true)
                                            IS DISTINCT FROM 'on') THEN
            IF NOT v_seen THEN
                IF (SELECT complete FROM dispatcher_dedup_seed) THEN
                    PERFORM set_config('dispatcher.dedup_keys_complete', 'on', false);
                ELSE
                    v_seen := EXISTS (SELECT 1 FROM webhook_history h
                                      WHERE h.event_id = v_event_id
                                        AND h.finished_at > dispatcher_dedup_since());
                END IF;
            END IF;
            IF v_seen THEN
                WITH dup AS (
                    DELETE FROM webhook_live w
                    USING unnest(v_ids) AS x(id)
                    WHERE w.id = x.id AND dispatcher_dedup_taken(v_event_id, w.endpoint_id)
                    RETURNING w.id
                )
                SELECT coalesce(array_agg(id), '{}') INTO v_dups FROM dup;
                IF cardinality(v_dups) > 0 THEN
                    v_ids := nullif(ARRAY(SELECT unnest(v_ids) EXCEPT SELECT unnest(v_dups)), '{}');
                    v_before := true;
                END IF;
            END IF;
        END IF;
    END IF;
    -- Only rows due now: held ones wait for their release, and rows for
    -- later are found by the workers' poll once due, as in `probe` mode.
    -- dispatcher_wake_workers() inlined: a plpgsql call would cost a
    -- producer more than the read of the switch itself.
    IF v_wake = 'notify' AND v_ids IS NOT NULL AND v_hold IS NOT TRUE
       AND coalesce(v_deliver_at, now()) <= now() THEN
        PERFORM pg_notify('dispatcher_due', '');
    END IF;
    IF coalesce(cardinality(v_ids), 0) = cardinality(v_targets) AND v_before IS NOT TRUE THEN
        RETURN v_ids;
    END IF;
    IF v_targets IS NULL THEN
        IF NOT EXISTS (SELECT 1 FROM applications WHERE id = p_app AND deleted_at IS NULL) THEN
            RAISE EXCEPTION 'unknown application: %', p_app USING ERRCODE = '22023';
        END IF;
        IF p_endpoint_id IS NOT NULL AND EXISTS (
            SELECT 1 FROM endpoints WHERE id = p_endpoint_id AND deleted_at IS NULL
              AND kind = 'webhook' AND application_id <> p_app) THEN
            RAISE EXCEPTION 'endpoint % is not in application %', p_endpoint_id, p_app
                USING ERRCODE = '22023';
        END IF;
        IF v_before IS NOT TRUE THEN
            RETURN '{}';
        END IF;
    END IF;
    SELECT coalesce(array_agg(q.id ORDER BY q.id), '{}') INTO v_ids
    FROM dispatcher_event_rows(v_event_id) q JOIN endpoints e ON e.id = q.endpoint_id
    WHERE e.deleted_at IS NULL AND e.application_id = p_app AND e.kind = 'webhook'
      AND CASE WHEN p_endpoint_id IS NULL
               THEN e.event_types @> ARRAY[p_event_type] OR e.event_types @> '{*}'
               ELSE e.id = p_endpoint_id END;
    RETURN v_ids;
END $$;

-- The text and jsonb forms producers hold, as dispatcher_enqueue takes
-- them (below): both land in the json one, with every named argument.
CREATE OR REPLACE FUNCTION dispatcher_enqueue_app(
    p_app text,
    p_event_type text,
    p_payload text,
    p_event_id text DEFAULT NULL,
    p_endpoint_id bigint DEFAULT NULL,
    channels text[] DEFAULT NULL,
    deliver_at timestamptz DEFAULT NULL,
    hold boolean DEFAULT false,
    traceparent text DEFAULT NULL,
    tracestate text DEFAULT NULL
) RETURNS bigint[]
LANGUAGE sql AS $$
    SELECT dispatcher_enqueue_app(p_app, p_event_type, p_payload::json, p_event_id,
                                  p_endpoint_id, channels => channels,
                                  deliver_at => deliver_at, hold => hold,
                                  traceparent => traceparent, tracestate => tracestate)
$$;

CREATE OR REPLACE FUNCTION dispatcher_enqueue_app(
    p_app text,
    p_event_type text,
    p_payload jsonb,
    p_event_id text DEFAULT NULL,
    p_endpoint_id bigint DEFAULT NULL,
    channels text[] DEFAULT NULL,
    deliver_at timestamptz DEFAULT NULL,
    hold boolean DEFAULT false,
    traceparent text DEFAULT NULL,
    tracestate text DEFAULT NULL
) RETURNS bigint[]
LANGUAGE sql AS $$
    SELECT dispatcher_enqueue_app(p_app, p_event_type, p_payload::text::json, p_event_id,
                                  p_endpoint_id, channels => channels,
                                  deliver_at => deliver_at, hold => hold,
                                  traceparent => traceparent, tracestate => tracestate)
$$;

-- The application of a live endpoint, or NULL.
CREATE OR REPLACE FUNCTION dispatcher_endpoint_app(p_endpoint_id bigint) RETURNS text
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (SELECT application_id FROM endpoints
            WHERE id = p_endpoint_id AND deleted_at IS NULL);
END $$;

-- The transactional outbox: call inside the producer's own transaction.
-- The event of application `default`, or, with an endpoint given by id,
-- that endpoint's application (dispatcher_enqueue_app). The payload is
-- json (kept byte for byte); the text and jsonb overloads below take the
-- other forms producers hold. One SQL expression, which PostgreSQL
-- inlines into the producer's statement when it is planned: the call is
-- then dispatcher_enqueue_app's alone (a plpgsql wrapper cost a
-- producer's transaction a second function's start-up; a SQL function
-- that cannot be inlined would be planned again by every call). The
-- endpoint's application is read by a function of its own for the same
-- reason: a sub-select would keep this one from being inlined.
CREATE OR REPLACE FUNCTION dispatcher_enqueue(
    p_event_type text,
    p_payload json,
    p_event_id text DEFAULT NULL,
    p_endpoint_id bigint DEFAULT NULL,
    traceparent text DEFAULT NULL,
    tracestate text DEFAULT NULL
) RETURNS bigint[]
LANGUAGE sql AS $$
    SELECT dispatcher_enqueue_app(
        CASE WHEN p_endpoint_id IS NULL THEN 'default'
             ELSE coalesce(dispatcher_endpoint_app(p_endpoint_id), 'default') END,
        p_event_type, p_payload, p_event_id, p_endpoint_id,
        traceparent => traceparent, tracestate => tracestate)
$$;

-- An untyped literal resolves to the text overload (PostgreSQL prefers the
-- string category), a jsonb value to the jsonb one; both land in the json one.
CREATE OR REPLACE FUNCTION dispatcher_enqueue(
    p_event_type text,
    p_payload text,
    p_event_id text DEFAULT NULL,
    p_endpoint_id bigint DEFAULT NULL,
    traceparent text DEFAULT NULL,
    tracestate text DEFAULT NULL
) RETURNS bigint[]
LANGUAGE sql AS $$
    SELECT dispatcher_enqueue(p_event_type, p_payload::json, p_event_id, p_endpoint_id,
                              traceparent => traceparent, tracestate => tracestate)
$$;

CREATE OR REPLACE FUNCTION dispatcher_enqueue(
    p_event_type text,
    p_payload jsonb,
    p_event_id text DEFAULT NULL,
    p_endpoint_id bigint DEFAULT NULL,
    traceparent text DEFAULT NULL,
    tracestate text DEFAULT NULL
) RETURNS bigint[]
LANGUAGE sql AS $$
    SELECT dispatcher_enqueue(p_event_type, p_payload::text::json, p_event_id, p_endpoint_id,
                              traceparent => traceparent, tracestate => tracestate)
$$;

-- A producer approves or rejects a conversion in its own transaction, as
-- it enqueued it. Both return the ids they changed.
--
-- Release: held → pending, due at its deliver_at or now. The rows are then
-- due: it wakes the workers as an enqueue does.
CREATE OR REPLACE FUNCTION dispatcher_release_event(p_app text, p_event_id text)
RETURNS bigint[]
LANGUAGE plpgsql AS $$
DECLARE
    v_ids bigint[];
BEGIN
    WITH changed AS (
        UPDATE webhook_live q
        SET status = 'pending', next_attempt_at = greatest(q.next_attempt_at, now()),
            updated_at = now()
        FROM endpoints e
        WHERE q.event_id = p_event_id AND q.status = 'held'
          AND e.id = q.endpoint_id AND e.application_id = p_app
        RETURNING q.id
    )
    SELECT coalesce(array_agg(id ORDER BY id), '{}') INTO v_ids FROM changed;
    IF cardinality(v_ids) > 0 THEN
        PERFORM dispatcher_wake_workers();
    END IF;
    RETURN v_ids;
END $$;

-- Cancel: held, pending or awaiting retry → cancelled (a row on the wire
-- is not stopped). The operator's operational webhooks live in application
-- default but are no tenant's: their deliveries name every application's
-- endpoints. An application's cancel of an event leaves them alone
-- (p_operator_ops false, as the service passes for every caller scoped to
-- an application); the operator, and producers' SQL, cancel everything of
-- the event (the default). Release needs no such flag: ops deliveries are
-- never held.
CREATE OR REPLACE FUNCTION dispatcher_cancel_event(
    p_app text, p_event_id text, p_operator_ops boolean DEFAULT true
) RETURNS bigint[]
LANGUAGE sql AS $$
    WITH changed AS (
        UPDATE webhook_live q
        SET status = 'cancelled', last_error = 'cancelled', locked_by = NULL,
            updated_at = now()
        FROM endpoints e
        WHERE q.event_id = p_event_id AND q.status IN ('held', 'pending', 'failed')
          AND e.id = q.endpoint_id AND e.application_id = p_app
          AND (p_operator_ops OR e.ops_scope IS DISTINCT FROM 'operator')
        RETURNING q.id
    )
    SELECT coalesce(array_agg(id ORDER BY id), '{}') FROM changed;
$$;

-- Erasure (schema 022, ops/erasure.py): the payloads of these deliveries
-- go, the rows stay. What is still to be sent is cancelled; a row on the
-- wire keeps its status and its holder (the worker dead-letters it unsent
-- if it must retry). Returns the rows that had a payload left (inline, or
-- a reference to the store, schema 025). A payload in the store goes with
-- the rows that referenced it (an event's deliveries are erased together),
-- unless its Svix message holds it too: that goes with the message
-- (dispatcher_erase_message), which every erasure of it reaches.
CREATE OR REPLACE FUNCTION dispatcher_erase_deliveries(p_ids bigint[])
RETURNS TABLE (id bigint, endpoint_id bigint, event_id text)
LANGUAGE sql AS $$
    WITH target AS MATERIALIZED (
        SELECT q.id, q.endpoint_id, q.event_id, q.payload_id, q.payload_at FROM webhook_live q
        WHERE q.id = ANY (p_ids) AND (q.payload IS NOT NULL OR q.payload_id IS NOT NULL)
        FOR UPDATE
    ), settled AS MATERIALIZED (
        -- History rows lose their payload in place (schema 026): the one
        -- edit history takes besides a replay's move.
        SELECT h.id, h.status, h.finished_at, h.endpoint_id, h.event_id, h.payload_id,
               h.payload_at
        FROM webhook_history h
        WHERE h.id = ANY (p_ids) AND (h.payload IS NOT NULL OR h.payload_id IS NOT NULL)
        FOR UPDATE
    ), erased_settled AS (
        UPDATE webhook_history h
        SET payload = NULL, payload_id = NULL, payload_at = NULL, payload_erased_at = now()
        FROM settled t
        WHERE h.id = t.id AND h.status = t.status AND h.finished_at = t.finished_at
        RETURNING h.id, h.endpoint_id, h.event_id, h.created_at
    ), erased_live AS (
        UPDATE webhook_live q
        SET payload = NULL, payload_id = NULL, payload_at = NULL, payload_erased_at = now(),
            status = CASE WHEN q.status IN ('held', 'pending', 'failed') THEN 'cancelled'
                          ELSE q.status END,
            last_error = CASE WHEN q.status IN ('held', 'pending', 'failed')
                              THEN 'payload expunged' ELSE q.last_error END,
            locked_by = CASE WHEN q.status = 'in_flight' THEN q.locked_by END,
            updated_at = CASE WHEN q.status IN ('held', 'pending', 'failed') THEN now()
                              ELSE q.updated_at END
        FROM target t
        WHERE q.id = t.id
        RETURNING q.id, q.endpoint_id, q.event_id, q.created_at
    ), erased AS (
        SELECT * FROM erased_live UNION ALL SELECT * FROM erased_settled
    ), stored AS (
        DELETE FROM event_payloads p
        USING (SELECT DISTINCT t.payload_id, t.payload_at, e.application_id, t.event_id
               FROM (SELECT endpoint_id, event_id, payload_id, payload_at FROM target
                     UNION ALL
                     SELECT endpoint_id, event_id, payload_id, payload_at FROM settled) t
               JOIN endpoints e ON e.id = t.endpoint_id
               WHERE t.payload_id IS NOT NULL) t
        WHERE p.id = t.payload_id AND p.created_at = t.payload_at
          AND NOT EXISTS (SELECT 1 FROM messages m
                          WHERE m.application_id = t.application_id AND m.id = t.event_id
                            AND m.payload_id = t.payload_id)
    ), attempts AS (
        -- With the payload go what its attempts kept of it (schema 024,
        -- SPEC "Limits"): the start of each response, which may echo it,
        -- the response's headers, which may too, and a postback's URL as
        -- fired, with its macro values.
        UPDATE endpoint_latency l
        SET detail = l.detail - 'response_excerpt' - 'request_url' - 'response_headers'
        FROM erased e
        WHERE l.endpoint_id = e.endpoint_id AND l.delivery_id = e.id
          AND l.measured_at >= e.created_at
          AND (l.detail ?| ARRAY['response_excerpt', 'request_url', 'response_headers'])
        RETURNING 1
    )
    SELECT e.id, e.endpoint_id, e.event_id FROM erased e;
$$;

-- A Svix message's payload erased, and its copy in the store with it.
-- Returns whether it had one left.
CREATE OR REPLACE FUNCTION dispatcher_erase_message(p_app text, p_id text)
RETURNS boolean
LANGUAGE sql AS $$
    WITH target AS MATERIALIZED (
        SELECT m.application_id, m.id, m.payload_id, m.payload_at FROM messages m
        WHERE m.application_id = p_app AND m.id = p_id
          AND (m.payload IS NOT NULL OR m.payload_id IS NOT NULL)
        FOR UPDATE
    ), erased AS (
        UPDATE messages m
        SET payload = NULL, payload_id = NULL, payload_at = NULL, payload_erased_at = now()
        FROM target t
        WHERE m.application_id = t.application_id AND m.id = t.id
    ), stored AS (
        DELETE FROM event_payloads p USING target t
        WHERE p.id = t.payload_id AND p.created_at = t.payload_at
    )
    SELECT EXISTS (SELECT 1 FROM target);
$$;
