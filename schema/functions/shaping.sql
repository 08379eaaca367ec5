-- What the fan-out reads of a payload for an endpoint's shaping settings
-- (schema 007: a filter decided at enqueue, FIFO per key), and the
-- endpoints an event targets. The enqueue functions (queue.sql) call these
-- per target endpoint; they look inside a payload only for the endpoints
-- that ask them to.
--
-- Functions here are defined once and edited in place: `dispatcher
-- migrate` re-applies this file when its text changes (CONTRIBUTING.md,
-- "Changing the schema").

-- A payload as jsonb, or NULL where jsonb cannot hold it (the json type
-- keeps a \u0000, say): such a payload matches no filter, and its FIFO lane
-- is the endpoint's ''. Called only for endpoints that look inside.
CREATE OR REPLACE FUNCTION dispatcher_payload_doc(p_payload json) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE STRICT AS $$
BEGIN
    RETURN p_payload::jsonb;
EXCEPTION WHEN untranslatable_character OR invalid_text_representation
               OR invalid_parameter_value THEN
    RETURN NULL;
END $$;

-- The lane of a payload for an endpoint's ordering settings (NULL: none);
-- the payload is read only when the lane is a field of it.
CREATE OR REPLACE FUNCTION dispatcher_order_key(p_ordering text, p_key text, p_payload json)
RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN p_ordering <> 'fifo' THEN NULL
                WHEN p_key IS NULL THEN ''
                ELSE coalesce(dispatcher_payload_doc(p_payload) #>> string_to_array(p_key, '.'),
                              '') END
$$;

-- Whether an endpoint's filter lets a payload through (no filter: yes).
CREATE OR REPLACE FUNCTION dispatcher_filter_passes(p_filter jsonb, p_payload json)
RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
    SELECT p_filter IS NULL OR coalesce(dispatcher_payload_doc(p_payload) @> p_filter, false)
$$;

-- An event's targets in its application: live endpoints of kind 'webhook'
-- (a producer's events never reach an ops webhook, by subscription or by
-- id), enabled and subscribed to the type, whose filter lets the payload
-- through and whose channels, if any, share one with p_channels; or only
-- p_endpoint_id, which is sent the event as asked. One SQL query that
-- PostgreSQL inlines into the statement that reads it (dispatcher_enqueue_app,
-- queue.sql, reads it twice).
CREATE OR REPLACE FUNCTION dispatcher_event_targets(
    p_app text, p_event_type text, p_payload json, p_endpoint_id bigint, p_channels text[]
) RETURNS TABLE (id bigint, max_attempts int, order_key text)
LANGUAGE sql STABLE AS $$
    SELECT e.id, e.max_attempts, dispatcher_order_key(e.ordering, e.ordering_key, p_payload)
    FROM endpoints e
    WHERE e.deleted_at IS NULL AND e.application_id = p_app AND e.kind = 'webhook'
      AND CASE WHEN p_endpoint_id IS NULL
               THEN e.enabled AND (e.event_types @> ARRAY[p_event_type] OR e.event_types @> '{*}')
                    AND dispatcher_filter_passes(e.filter, p_payload)
                    AND (e.channels IS NULL OR e.channels && p_channels)
               ELSE e.id = p_endpoint_id END
$$;
