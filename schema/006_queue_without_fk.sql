-- Producers' inserts no longer lock the endpoint row. A foreign key check
-- takes FOR KEY SHARE on the referenced endpoints row: with many producers
-- enqueueing for the same endpoints at once, every commit rewrites that
-- row's lock (a multixact) and they queue on its page. Queue rows are only
-- ever created by joining the live endpoints (dispatcher_enqueue, the bulk
-- fan-out), endpoints are deleted softly (schema 003), and a hard DELETE
-- still takes its queue rows with it, by the trigger below.
ALTER TABLE webhook_queue DROP CONSTRAINT IF EXISTS webhook_queue_endpoint_id_fkey;

CREATE FUNCTION dispatcher_endpoint_gone() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM webhook_queue WHERE endpoint_id = OLD.id;
    RETURN OLD;
END $$;

CREATE TRIGGER endpoints_delete_queue AFTER DELETE ON endpoints
    FOR EACH ROW EXECUTE FUNCTION dispatcher_endpoint_gone();

-- dispatcher_enqueue as in 005, in one statement when the event id is new:
-- whether rows with this id existed before is asked in the INSERT's own
-- statement, whose snapshot does not include the rows it inserts; a row
-- a concurrent call inserted shows as a target without its row, and then
-- the second lookup (a new snapshot) answers, as before.
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
        SELECT e.id, e.max_attempts FROM endpoints e
        WHERE e.deleted_at IS NULL
          AND CASE WHEN p_endpoint_id IS NULL
                   THEN e.enabled AND (e.event_types @> ARRAY[p_event_type] OR e.event_types @> '{*}')
                   ELSE e.id = p_endpoint_id END
    ), ins AS (
        INSERT INTO webhook_queue (endpoint_id, event_id, event_type, payload, max_attempts)
        SELECT t.id, v_event_id, p_event_type, p_payload, t.max_attempts FROM target t
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
