-- Producers commit without NOTIFY. A transaction that NOTIFYs takes one
-- lock for the whole server at commit and holds it through the WAL flush,
-- so concurrent producers' commits ran one at a time (no group commit):
-- 16 producers reached a quarter of a plain INSERT's rate. Workers now learn
-- of new rows by a cheap probe while idle (see dispatcher/prober.py); the
-- LISTEN channel stays for rare operator actions (replay, enable).
DROP TRIGGER IF EXISTS webhook_queue_notify ON webhook_queue;
DROP FUNCTION IF EXISTS dispatcher_notify_due();

-- dispatcher_enqueue as in 003, with one statement fewer in the common
-- case: the INSERT returns the new ids; the lookup of the deliveries an
-- event id already had runs only when some exist.
CREATE OR REPLACE FUNCTION dispatcher_enqueue(
    p_event_type text,
    p_payload json,
    p_event_id text DEFAULT NULL,
    p_endpoint_id bigint DEFAULT NULL
) RETURNS bigint[]
LANGUAGE plpgsql AS $$
DECLARE
    v_event_id text := coalesce(p_event_id, 'evt_' || replace(gen_random_uuid()::text, '-', ''));
    v_ids bigint[];
    v_new int;
BEGIN
    IF p_event_type IS NULL OR p_event_type = '' OR length(p_event_type) > 200 THEN
        RAISE EXCEPTION 'event_type must be 1..200 characters' USING ERRCODE = '22023';
    END IF;
    IF length(v_event_id) NOT BETWEEN 1 AND 200 THEN
        RAISE EXCEPTION 'event_id must be 1..200 characters' USING ERRCODE = '22023';
    END IF;
    IF p_payload IS NULL THEN
        RAISE EXCEPTION 'payload must not be null' USING ERRCODE = '22023';
    END IF;
    IF octet_length(p_payload::text) >
       coalesce(nullif(current_setting('dispatcher.max_payload_bytes', true), '')::int, 262144) THEN
        RAISE EXCEPTION 'payload is over the size limit' USING ERRCODE = '22023';
    END IF;
    WITH ins AS (
        INSERT INTO webhook_queue (endpoint_id, event_id, event_type, payload, max_attempts)
        SELECT e.id, v_event_id, p_event_type, p_payload, e.max_attempts
        FROM endpoints e
        WHERE e.deleted_at IS NULL
          AND CASE WHEN p_endpoint_id IS NULL
                   THEN e.enabled AND (e.event_types @> ARRAY[p_event_type] OR e.event_types @> '{*}')
                   ELSE e.id = p_endpoint_id END
        ON CONFLICT (endpoint_id, event_id) DO NOTHING
        RETURNING id
    )
    SELECT coalesce(array_agg(id ORDER BY id), '{}'), count(*) INTO v_ids, v_new FROM ins;
    -- A generated id is new; a given one usually is too: every row with it
    -- is one just inserted, and those are the answer.
    IF p_event_id IS NULL
       OR (SELECT count(*) FROM webhook_queue q WHERE q.event_id = v_event_id) = v_new THEN
        RETURN v_ids;
    END IF;
    -- Idempotent: a repeated event id answers with the deliveries it already has.
    SELECT coalesce(array_agg(q.id ORDER BY q.id), '{}') INTO v_ids
    FROM webhook_queue q JOIN endpoints e ON e.id = q.endpoint_id
    WHERE q.event_id = v_event_id
      AND e.deleted_at IS NULL
      AND CASE WHEN p_endpoint_id IS NULL
               THEN e.event_types @> ARRAY[p_event_type] OR e.event_types @> '{*}'
               ELSE e.id = p_endpoint_id END;
    RETURN v_ids;
END $$;

-- Where autovacuum runs, it should visit the hot tables long before the
-- default 20 % of dead rows: every delivery leaves two or three dead
-- versions behind. Where it is off, the worker's maintenance vacuums them
-- itself (dispatcher/vacuum.py).
ALTER TABLE webhook_queue SET (
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 5000,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_insert_scale_factor = 0.05
);
ALTER TABLE endpoint_latency SET (
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_threshold = 5000,
    autovacuum_vacuum_insert_scale_factor = 0.05
);
