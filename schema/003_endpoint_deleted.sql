-- Deleting an endpoint is a soft delete: the row stays so its dead letters,
-- latency samples and breaker history keep their endpoint, but a deleted
-- endpoint is not listed, gets no new deliveries and the worker forgets it.
ALTER TABLE endpoints ADD COLUMN deleted_at timestamptz;

-- dispatcher_enqueue as in 001, skipping deleted endpoints (the text and
-- jsonb overloads call this one).
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
    v_payload json;
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
    v_payload := p_payload;
    IF octet_length(v_payload::text) >
       coalesce(nullif(current_setting('dispatcher.max_payload_bytes', true), '')::int, 262144) THEN
        RAISE EXCEPTION 'payload is over the size limit' USING ERRCODE = '22023';
    END IF;
    INSERT INTO webhook_queue (endpoint_id, event_id, event_type, payload, max_attempts)
    SELECT e.id, v_event_id, p_event_type, v_payload, e.max_attempts
    FROM endpoints e
    WHERE e.deleted_at IS NULL
      AND CASE WHEN p_endpoint_id IS NULL
               THEN e.enabled AND (e.event_types @> ARRAY[p_event_type] OR e.event_types @> '{*}')
               ELSE e.id = p_endpoint_id END
    ON CONFLICT (endpoint_id, event_id) DO NOTHING;
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
