-- Final rows leave the live queue for history (schema 026), and come back
-- when replayed or resent. Every path to a final status ends here or in
-- record_outcomes (dispatcher/db/queries.sql), which moves the flush's
-- delivered and dead rows itself in its one statement.

-- When a row became final: the partition key of its history (NULL for a
-- status that is not final).
CREATE OR REPLACE FUNCTION dispatcher_finished_at(
    p_status text, p_delivered_at timestamptz, p_updated_at timestamptz
) RETURNS timestamptz
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN p_status = 'delivered' THEN coalesce(p_delivered_at, p_updated_at)
                WHEN p_status IN ('dead_letter', 'cancelled') THEN p_updated_at END
$$;

-- The dedup window (schema 026): how far back history is asked whether an
-- event id is taken. Read once per statement (STABLE), so a probe of
-- history prunes to the partitions of that span.
CREATE OR REPLACE FUNCTION dispatcher_dedup_since() RETURNS timestamptz
LANGUAGE sql STABLE AS $$
    SELECT now() - make_interval(secs => coalesce(
        (SELECT dedup_window_s FROM dispatcher_settings), 86400))
$$;

-- The deliveries an event id has taken: live, or final within the dedup
-- window. What enqueue asks before and after it inserts (queue.sql). A
-- plain SQL function: inlined into the caller's statement.
CREATE OR REPLACE FUNCTION dispatcher_event_rows(p_event_id text)
RETURNS TABLE (id bigint, endpoint_id bigint)
LANGUAGE sql STABLE AS $$
    SELECT w.id, w.endpoint_id FROM webhook_live w WHERE w.event_id = p_event_id
    UNION ALL
    SELECT h.id, h.endpoint_id FROM webhook_history h
    WHERE h.event_id = p_event_id AND h.finished_at > dispatcher_dedup_since()
$$;

-- The final rows among p_ids, moved from webhook_live into history in one
-- statement (DELETE ... RETURNING into INSERT: a row is in one place at
-- every instant, and a claim that waited on it finds nothing). Returns
-- how many moved. The one mapping of webhook_live's columns onto
-- webhook_history's.
CREATE OR REPLACE FUNCTION dispatcher_settle(p_ids bigint[]) RETURNS integer
LANGUAGE sql AS $$
    WITH gone AS (
        DELETE FROM webhook_live w
        WHERE w.id = ANY (p_ids) AND w.status IN ('delivered', 'dead_letter', 'cancelled')
        RETURNING w.*
    ), moved AS (
        INSERT INTO webhook_history (id, endpoint_id, event_id, event_type, payload, status,
            attempt_count, max_attempts, created_at, next_attempt_at, delivered_at, updated_at,
            locked_by, last_error, last_status_code, last_response_ms, order_key, resent_at,
            payload_erased_at, traceparent, tracestate, payload_id, payload_at, finished_at)
        SELECT id, endpoint_id, event_id, event_type, payload, status, attempt_count,
               max_attempts, created_at, next_attempt_at, delivered_at, updated_at, NULL,
               last_error, last_status_code, last_response_ms, order_key, resent_at,
               payload_erased_at, traceparent, tracestate, payload_id, payload_at,
               dispatcher_finished_at(status, delivered_at, updated_at)
        FROM gone
        RETURNING 1
    )
    SELECT count(*)::integer FROM moved
$$;

-- Any statement that makes a live row final (a cancel, an expiry, a
-- forced endpoint delete, a hand edit) moves it, at the end of that
-- statement. The outcome write does not come here: it deletes and
-- inserts itself (no version of the row written only to be removed).
CREATE OR REPLACE FUNCTION dispatcher_live_settled() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM dispatcher_settle(ARRAY[NEW.id]);
    RETURN NULL;
END $$;

CREATE OR REPLACE TRIGGER webhook_live_settled_update AFTER UPDATE OF status ON webhook_live
    FOR EACH ROW WHEN (NEW.status IN ('delivered', 'dead_letter', 'cancelled'))
    EXECUTE FUNCTION dispatcher_live_settled();
CREATE OR REPLACE TRIGGER webhook_live_settled_insert AFTER INSERT ON webhook_live
    FOR EACH ROW WHEN (NEW.status IN ('delivered', 'dead_letter', 'cancelled'))
    EXECUTE FUNCTION dispatcher_live_settled();

-- Replay and resend: the rows among p_ids in history with a status of
-- p_from go back to the live queue, due now, with their id, creation
-- time and payload reference (the browser keeps showing them where they
-- were; a FIFO lane keeps them in their place). One still in webhook_live
-- (final before schema 026, not yet moved) is moved first. A row with a
-- live twin of its (event, endpoint) stays. p_resent marks a resend.
-- Returns the ids now live. The caller has checked the endpoint and the
-- payload.
CREATE OR REPLACE FUNCTION dispatcher_revive(p_ids bigint[], p_from text[], p_resent boolean)
RETURNS SETOF bigint
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM dispatcher_settle(p_ids);
    RETURN QUERY
    WITH gone AS (
        DELETE FROM webhook_history h
        WHERE h.id = ANY (p_ids) AND h.status = ANY (p_from)
          AND NOT EXISTS (SELECT 1 FROM webhook_live l
                          WHERE l.event_id = h.event_id AND l.endpoint_id = h.endpoint_id)
        RETURNING h.*
    )
    INSERT INTO webhook_live (id, endpoint_id, event_id, event_type, payload, status,
        attempt_count, max_attempts, created_at, next_attempt_at, delivered_at, updated_at,
        last_error, last_status_code, last_response_ms, order_key, resent_at,
        payload_erased_at, traceparent, tracestate, payload_id, payload_at)
    SELECT g.id, g.endpoint_id, g.event_id, g.event_type, g.payload, 'pending', 0,
           g.max_attempts, g.created_at, now(), g.delivered_at, now(), g.last_error,
           g.last_status_code, g.last_response_ms, g.order_key,
           CASE WHEN p_resent THEN now() ELSE g.resent_at END, g.payload_erased_at,
           g.traceparent, g.tracestate, g.payload_id, g.payload_at
    FROM gone g
    RETURNING webhook_live.id;
END $$;

-- One step of the move of the rows final before schema 026
-- (dispatcher_history_backfill): the next p_batch ids of webhook_live up
-- to its mark, those past their retention (p_keep_*: seconds, NULL keeps)
-- deleted, the others moved (into the partitions the caller made first,
-- each in its own transaction: backfill_days in queries.sql; DDL here
-- would hold one status's locks while taking the next one's, under
-- producers reading history: a deadlock). Row locks only, on rows no
-- worker holds; the cursor is saved with them. Returns the rows handled,
-- NULL once the move is done.
CREATE OR REPLACE FUNCTION dispatcher_backfill_history(
    p_batch integer, p_keep_delivered float8, p_keep_dead float8, p_keep_cancelled float8
) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    b dispatcher_history_backfill;
    v_last bigint;
    v_ids bigint[];
    n integer;
BEGIN
    SELECT * INTO b FROM dispatcher_history_backfill FOR UPDATE SKIP LOCKED;
    IF NOT FOUND OR b.done_at IS NOT NULL THEN
        RETURN NULL;
    END IF;
    SELECT max(id) INTO v_last FROM (
        SELECT id FROM webhook_live WHERE id > b.cursor AND id <= b.upto
        ORDER BY id LIMIT p_batch) s;
    IF v_last IS NULL THEN
        UPDATE dispatcher_history_backfill SET cursor = upto, done_at = now();
        RETURN NULL;
    END IF;
    DELETE FROM webhook_live w
    WHERE w.id > b.cursor AND w.id <= v_last
      AND ((w.status = 'delivered' AND dispatcher_finished_at(w.status, w.delivered_at, w.updated_at)
                < now() - make_interval(secs => p_keep_delivered))
        OR (w.status = 'dead_letter' AND w.updated_at < now() - make_interval(secs => p_keep_dead))
        OR (w.status = 'cancelled'
            AND w.updated_at < now() - make_interval(secs => p_keep_cancelled)));
    GET DIAGNOSTICS n = ROW_COUNT;
    SELECT array_agg(w.id) INTO v_ids FROM webhook_live w
    WHERE w.id > b.cursor AND w.id <= v_last
      AND w.status IN ('delivered', 'dead_letter', 'cancelled');
    IF v_ids IS NOT NULL THEN
        n := n + dispatcher_settle(v_ids);
    END IF;
    UPDATE dispatcher_history_backfill SET cursor = v_last;
    RETURN n;
END $$;
