-- Deliver in the shape each receiver expects: the request's method and body
-- (affiliate postbacks are GETs with URL macros), what counts as success in
-- a 2xx body, which events an endpoint wants (a filter decided at enqueue),
-- FIFO per key, and per-endpoint TLS client credentials.
--
-- Every new endpoints column has a constant default or none: no table
-- rewrite. webhook_queue gains one nullable column (no rewrite either) and
-- one partial index over live FIFO rows only, which starts out empty.
ALTER TABLE endpoints
    ADD COLUMN method text NOT NULL DEFAULT 'POST' CHECK (method IN ('POST', 'GET', 'PUT')),
    -- NULL: the method's default (json for POST and PUT, none for GET).
    ADD COLUMN body text CHECK (body IS NULL OR body IN ('json', 'form', 'none')),
    ADD COLUMN success_body text CHECK (success_body IS NULL OR length(success_body) <= 1000),
    ADD COLUMN filter jsonb CHECK (filter IS NULL OR jsonb_typeof(filter) = 'object'),
    ADD COLUMN ordering text NOT NULL DEFAULT 'none' CHECK (ordering IN ('none', 'fifo')),
    ADD COLUMN ordering_key text
        CHECK (ordering_key IS NULL OR ordering_key ~ '^[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*$'),
    -- PEM, sealed like secrets when DISPATCHER_SECRET_KEY is set.
    ADD COLUMN client_cert text,
    ADD COLUMN client_key text;

-- A FIFO endpoint's lane: the ordering key's value (or '' without a key),
-- fixed at enqueue; NULL for unordered endpoints.
ALTER TABLE webhook_queue ADD COLUMN order_key text;

-- The claim asks, for a FIFO row, whether an earlier live row of the same
-- lane exists: one index probe, over live FIFO rows only.
CREATE INDEX webhook_queue_lane_idx ON webhook_queue (endpoint_id, order_key, id)
    WHERE order_key IS NOT NULL AND status IN ('pending', 'failed', 'in_flight');

-- A payload as jsonb, or NULL where jsonb cannot hold it (the json type
-- keeps a \u0000, say): such a payload matches no filter, and its FIFO lane
-- is the endpoint's ''. Called only for endpoints that look inside.
CREATE FUNCTION dispatcher_payload_doc(p_payload json) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE STRICT AS $$
BEGIN
    RETURN p_payload::jsonb;
EXCEPTION WHEN untranslatable_character OR invalid_text_representation
               OR invalid_parameter_value THEN
    RETURN NULL;
END $$;

-- The lane of a payload for an endpoint's ordering settings (NULL: none);
-- the payload is read only when the lane is a field of it.
CREATE FUNCTION dispatcher_order_key(p_ordering text, p_key text, p_payload json)
RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN p_ordering <> 'fifo' THEN NULL
                WHEN p_key IS NULL THEN ''
                ELSE coalesce(dispatcher_payload_doc(p_payload) #>> string_to_array(p_key, '.'),
                              '') END
$$;

-- Whether an endpoint's filter lets a payload through (no filter: yes).
CREATE FUNCTION dispatcher_filter_passes(p_filter jsonb, p_payload json)
RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
    SELECT p_filter IS NULL OR coalesce(dispatcher_payload_doc(p_payload) @> p_filter, false)
$$;

-- dispatcher_enqueue as in 006, with the endpoint's filter (fan-out only:
-- an event sent to one endpoint by id is sent as asked) and its FIFO lane.
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
    v_new boolean;
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
    WITH target AS MATERIALIZED (
        SELECT e.id, e.max_attempts,
               dispatcher_order_key(e.ordering, e.ordering_key, p_payload) AS order_key
        FROM endpoints e
        WHERE e.deleted_at IS NULL
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
           -- Every target got its row (none was there already, or being
           -- inserted by a concurrent call) and no other row has this id.
           count(*) = (SELECT count(*) FROM target)
           AND NOT (p_event_id IS NOT NULL
                    AND EXISTS (SELECT 1 FROM webhook_queue q WHERE q.event_id = v_event_id))
    INTO v_ids, v_new
    FROM ins;
    IF v_new THEN
        RETURN v_ids;
    END IF;
    -- Idempotent: a repeated event id answers with the deliveries it has.
    SELECT coalesce(array_agg(q.id ORDER BY q.id), '{}') INTO v_ids
    FROM webhook_queue q JOIN endpoints e ON e.id = q.endpoint_id
    WHERE q.event_id = v_event_id
      AND e.deleted_at IS NULL
      AND CASE WHEN p_endpoint_id IS NULL
               THEN e.event_types @> ARRAY[p_event_type] OR e.event_types @> '{*}'
               ELSE e.id = p_endpoint_id END;
    RETURN v_ids;
END $$;
