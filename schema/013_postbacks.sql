-- Postback tooling (SPEC "Postback tooling (affiliate networks)"): macro
-- styles and value maps per endpoint, held and cancelled deliveries, and
-- disabling an endpoint after N consecutive failures within S seconds.
--
-- What this costs on a live system: endpoints gets columns with constant
-- defaults (no rewrite); webhook_queue's status CHECK is replaced by a
-- looser one added NOT VALID, so nothing scans the queue under the lock
-- (every existing row passed the old, stricter check); the index on held
-- rows starts empty because no row is held yet.

ALTER TABLE endpoints
    ADD COLUMN macro_style text NOT NULL DEFAULT 'brace'
        CHECK (macro_style IN ('brace', 'hash', 'double')),
    -- {"status": {"approved": "1", "*": "0"}}: a macro's value → the partner's code.
    ADD COLUMN value_map jsonb,
    ADD COLUMN disable_after integer
        CONSTRAINT endpoints_disable_after_range CHECK (disable_after BETWEEN 1 AND 1000),
    ADD COLUMN disable_within_s double precision
        CONSTRAINT endpoints_disable_within_s_range
        CHECK (disable_within_s BETWEEN 1 AND 2592000),
    ADD CONSTRAINT endpoints_disable_pair
        CHECK ((disable_after IS NULL) = (disable_within_s IS NULL));

-- The times (epoch seconds) of the current run of consecutive failed
-- attempts, newest last, at most disable_after of them: kept only for
-- endpoints with disable_after, written with the breaker (same lock).
ALTER TABLE endpoint_health
    ADD COLUMN failure_times double precision[] NOT NULL DEFAULT '{}';

-- held: enqueued with hold, not sent until released. cancelled: ended by
-- `event cancel`, never sent. Neither is in webhook_queue_due_idx (its
-- predicate is pending/failed/in_flight), so the claim never sees them.
ALTER TABLE webhook_queue DROP CONSTRAINT webhook_queue_status_check;
ALTER TABLE webhook_queue ADD CONSTRAINT webhook_queue_status_check
    CHECK (status IN ('pending', 'in_flight', 'delivered', 'failed', 'dead_letter',
                      'held', 'cancelled')) NOT VALID;
-- Counts and lists of held rows (health, the dashboard) without a scan of
-- the queue; release and cancel find an event's rows by the unique
-- (event_id, endpoint_id) index.
CREATE INDEX webhook_queue_held_idx ON webhook_queue (endpoint_id, created_at)
    WHERE status = 'held';

-- dispatcher_enqueue_app (012) with `hold`: the rows are inserted `held`
-- (still due at deliver_at, or now, once released). One signature, so
-- named arguments resolve.
DROP FUNCTION dispatcher_enqueue_app(text, text, json, text, bigint, text[], timestamptz);
CREATE FUNCTION dispatcher_enqueue_app(
    p_app text,
    p_event_type text,
    p_payload json,
    p_event_id text DEFAULT NULL,
    p_endpoint_id bigint DEFAULT NULL,
    channels text[] DEFAULT NULL,
    deliver_at timestamptz DEFAULT NULL,
    hold boolean DEFAULT false
) RETURNS bigint[]
LANGUAGE plpgsql AS $$
DECLARE
    v_event_id text := coalesce(p_event_id, 'evt_' || replace(gen_random_uuid()::text, '-', ''));
    v_ids bigint[];
    v_new boolean;
    v_targets bigint;
    v_channels text[] := channels;
    v_due timestamptz := coalesce(deliver_at, now());
    v_status text := CASE WHEN coalesce(hold, false) THEN 'held' ELSE 'pending' END;
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
                        AND (e.channels IS NULL OR e.channels && v_channels)
                   ELSE e.id = p_endpoint_id END
    ), ins AS (
        INSERT INTO webhook_queue (endpoint_id, event_id, event_type, payload, max_attempts,
                                   order_key, next_attempt_at, status)
        SELECT t.id, v_event_id, p_event_type, p_payload, t.max_attempts, t.order_key, v_due,
               v_status
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

-- A producer approves or rejects a conversion in its own transaction, as
-- it enqueued it. Release: held → pending, due at its deliver_at or now.
-- Cancel: held, pending or awaiting retry → cancelled (a row on the wire
-- is not stopped). Both return the ids they changed.
CREATE FUNCTION dispatcher_release_event(p_app text, p_event_id text) RETURNS bigint[]
LANGUAGE sql AS $$
    WITH changed AS (
        UPDATE webhook_queue q
        SET status = 'pending', next_attempt_at = greatest(q.next_attempt_at, now()),
            updated_at = now()
        FROM endpoints e
        WHERE q.event_id = p_event_id AND q.status = 'held'
          AND e.id = q.endpoint_id AND e.application_id = p_app
        RETURNING q.id
    )
    SELECT coalesce(array_agg(id ORDER BY id), '{}') FROM changed;
$$;

CREATE FUNCTION dispatcher_cancel_event(p_app text, p_event_id text) RETURNS bigint[]
LANGUAGE sql AS $$
    WITH changed AS (
        UPDATE webhook_queue q
        SET status = 'cancelled', last_error = 'cancelled', locked_by = NULL,
            updated_at = now()
        FROM endpoints e
        WHERE q.event_id = p_event_id AND q.status IN ('held', 'pending', 'failed')
          AND e.id = q.endpoint_id AND e.application_id = p_app
        RETURNING q.id
    )
    SELECT coalesce(array_agg(id ORDER BY id), '{}') FROM changed;
$$;
