-- Wake-up chosen per deployment (issue 26). `probe` (the default, and what
-- every deployment did before): producers commit without NOTIFY and each
-- idle worker probes for new rows every 10 ms (schema 005). `notify`: the
-- enqueue functions NOTIFY dispatcher_due once per call that queued
-- something due, and idle workers do not probe at all. A NOTIFY takes one
-- server-wide lock at commit and keeps it through the WAL flush, so
-- producers' commits run one at a time: right for up to a few thousand
-- producer commits a second, wrong past that (docs/operations/scaling.md).
--
-- A table, not a GUC: the enqueue functions of sessions already open see a
-- change at their next call, and workers hear of it on the channel that
-- wakes their refresh. Reading it costs a producer a scan of a one-row
-- table per call that queued something: a few microseconds, against about
-- 150 for the enqueue function and milliseconds for its commit.

CREATE TABLE dispatcher_settings (
    one_row boolean PRIMARY KEY DEFAULT true CHECK (one_row),
    wake text NOT NULL DEFAULT 'probe' CHECK (wake IN ('notify', 'probe')),
    updated_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO dispatcher_settings DEFAULT VALUES;

-- Workers re-read it at once (the refresher's channel, schema 012).
CREATE TRIGGER settings_changed AFTER INSERT OR UPDATE OR DELETE ON dispatcher_settings
    FOR EACH ROW EXECUTE FUNCTION dispatcher_endpoints_changed();

-- NOTIFY the workers when the switch says so: what every path that makes
-- rows due calls (dispatcher_enqueue_app below inlines the same test).
-- Identical notifications of one transaction fold into one, so a producer
-- that enqueues many events in one transaction still sends one.
CREATE FUNCTION dispatcher_wake_workers() RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF (SELECT wake FROM dispatcher_settings) = 'notify' THEN
        PERFORM pg_notify('dispatcher_due', '');
    END IF;
END $$;

-- dispatcher_enqueue_app as in 013 (its targets of kind 'webhook' only, as
-- since 011), waking the workers when it queued rows due now.
-- dispatcher_enqueue and its text and jsonb overloads all end here.
CREATE OR REPLACE FUNCTION dispatcher_enqueue_app(
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
    -- Only rows due now: held ones wait for their release, and rows for
    -- later are found by the workers' poll once due, as in `probe` mode.
    -- dispatcher_wake_workers() inlined (a plpgsql call would cost a
    -- producer more than the read of the switch itself), and the switch
    -- read only when this call queued rows due now.
    IF cardinality(v_ids) > 0 AND v_status = 'pending' AND v_due <= now()
       AND (SELECT wake FROM dispatcher_settings) = 'notify' THEN
        PERFORM pg_notify('dispatcher_due', '');
    END IF;
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

-- A producer's release of held rows makes them due now: it wakes the
-- workers as an enqueue does.
CREATE OR REPLACE FUNCTION dispatcher_release_event(p_app text, p_event_id text)
RETURNS bigint[]
LANGUAGE plpgsql AS $$
DECLARE
    v_ids bigint[];
BEGIN
    WITH changed AS (
        UPDATE webhook_queue q
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
