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

-- The dedup window's keys (schema 027): each row entering history leaves
-- its (event id, endpoint) and when that expires (finished_at + the
-- window) in the current one of two small tables, where the enqueue asks
-- for it (two small indexes, not every leaf of history). A statement
-- trigger: one insert per flush, whoever wrote the rows (the outcome
-- write, dispatcher_settle, the backfill, an older release's code); rows
-- already past the window (the backfill's old ones) leave none.
CREATE OR REPLACE VIEW dispatcher_dedup_keys AS
SELECT 0::smallint AS slot, event_id, endpoint_id, expires_at FROM dispatcher_dedup_keys_0
UNION ALL
SELECT 1::smallint, event_id, endpoint_id, expires_at FROM dispatcher_dedup_keys_1;

-- The statement that writes the keys of p_source's rows (a relation with
-- event_id, endpoint_id and finished_at: the trigger's transition table,
-- or history itself for the seeding below) with finished_at in ($2, $3]
-- and within the window ($1) into the current table. Text, run by the
-- caller's EXECUTE: a transition table is visible only in its trigger's
-- function.
CREATE OR REPLACE FUNCTION dispatcher_dedup_keys_insert(p_source text) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT format('INSERT INTO %I (event_id, endpoint_id, expires_at)'
                  ' SELECT event_id, endpoint_id, finished_at + $1 FROM %I'
                  ' WHERE finished_at > greatest($2, now() - $1) AND finished_at <= $3',
                  'dispatcher_dedup_keys_'
                  || (SELECT slot FROM dispatcher_dedup_slots ORDER BY opened_at DESC LIMIT 1),
                  p_source)
$$;

-- The window, as an interval.
CREATE OR REPLACE FUNCTION dispatcher_dedup_window() RETURNS interval
LANGUAGE sql STABLE AS $$
    SELECT make_interval(secs => (SELECT dedup_window_s FROM dispatcher_settings))
$$;

-- The dead letters' count (schema 029) moves with the rows: one row
-- appended for each change, none for a statement that moved none.
CREATE OR REPLACE FUNCTION dispatcher_count_dead(p_delta bigint) RETURNS void
LANGUAGE sql AS $$
    INSERT INTO dispatcher_counts (name, n) SELECT 'dead_letters', p_delta WHERE p_delta <> 0
$$;

-- A count's rows folded into one, and the dead letters' deltas into their
-- buckets (schema 030), by maintenance (one worker at a time): rows
-- appended meanwhile are not in its snapshot and stay, to be folded next
-- time.
CREATE OR REPLACE FUNCTION dispatcher_fold_counts() RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    WITH gone AS (DELETE FROM dispatcher_counts RETURNING name, n)
    INSERT INTO dispatcher_counts (name, n) SELECT name, sum(n) FROM gone GROUP BY name;
    -- The buckets have no unique key (a NULL code or error is a key part):
    -- two folds at once (maintenance takes its lock; a hand call need not)
    -- could each insert the same bucket. Readers are not blocked.
    LOCK TABLE dead_letter_buckets IN EXCLUSIVE MODE;
    WITH gone AS (DELETE FROM dead_letter_deltas RETURNING *),
    summed AS (
        SELECT endpoint_id, bucket, last_status_code, last_error, sum(n) AS n,
               sum(attempts) AS attempts
        FROM gone GROUP BY 1, 2, 3, 4
    ), kept AS (
        UPDATE dead_letter_buckets b
        SET n = b.n + s.n, attempts = b.attempts + s.attempts
        FROM summed s
        WHERE b.bucket = s.bucket AND b.endpoint_id = s.endpoint_id
          AND b.last_status_code IS NOT DISTINCT FROM s.last_status_code
          AND b.last_error IS NOT DISTINCT FROM s.last_error
        RETURNING s.*
    )
    INSERT INTO dead_letter_buckets
    SELECT s.* FROM summed s
    WHERE s.n <> 0 AND NOT EXISTS (
        SELECT 1 FROM kept k
        WHERE k.bucket = s.bucket AND k.endpoint_id = s.endpoint_id
          AND k.last_status_code IS NOT DISTINCT FROM s.last_status_code
          AND k.last_error IS NOT DISTINCT FROM s.last_error);
    DELETE FROM dead_letter_buckets WHERE n <= 0;
END $$;

-- What a count is: the sum of its rows.
CREATE OR REPLACE FUNCTION dispatcher_count(p_name text) RETURNS bigint
LANGUAGE sql STABLE AS $$
    SELECT coalesce(sum(n), 0)::bigint FROM dispatcher_counts WHERE name = p_name
$$;

-- Which five minutes a dead letter is counted in (schema 030).
CREATE OR REPLACE FUNCTION dispatcher_dead_bucket(p_at timestamptz) RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT date_bin('5 minutes', p_at, timestamptz '2000-01-01 00:00+00')
$$;

-- The first bucket wholly after p_at: a span from p_at reads its buckets
-- from here, and the letters before it one by one.
CREATE OR REPLACE FUNCTION dispatcher_dead_whole_from(p_at timestamptz) RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT dispatcher_dead_bucket(p_at) + interval '5 minutes'
$$;

-- The statement that counts the dead letters of p_source (a transition
-- table, a partition, or a CTE p_with defines) into dead_letter_deltas,
-- arriving (p_sign 1) or leaving (-1), and returns how many, signed: the
-- triggers, the partition drop and the prune share it.
CREATE OR REPLACE FUNCTION dispatcher_dead_deltas_insert(
    p_source text, p_sign integer, p_with text DEFAULT ''
) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT format(
        'WITH %s counted AS (INSERT INTO dead_letter_deltas'
        '  (endpoint_id, bucket, last_status_code, last_error, n, attempts)'
        ' SELECT endpoint_id, dispatcher_dead_bucket(updated_at), last_status_code, last_error,'
        '  %s * count(*), %s * sum(attempt_count)'
        ' FROM %s WHERE status = ''dead_letter'' GROUP BY 1, 2, 3, 4 RETURNING n)'
        ' SELECT coalesce(sum(n), 0)::bigint FROM counted',
        p_with, p_sign, p_sign, p_source)
$$;

CREATE OR REPLACE FUNCTION dispatcher_history_keys() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    dead bigint;
BEGIN
    EXECUTE dispatcher_dedup_keys_insert('arrived')
        USING dispatcher_dedup_window(), '-infinity'::timestamptz, 'infinity'::timestamptz;
    -- Checked here, not in the function: an outcome write with no dead
    -- letter (nearly all) plans no INSERT.
    IF EXISTS (SELECT FROM arrived WHERE status = 'dead_letter') THEN
        EXECUTE dispatcher_dead_deltas_insert('arrived', 1) INTO dead;
        PERFORM dispatcher_count_dead(dead);
    END IF;
    RETURN NULL;
END $$;

CREATE OR REPLACE TRIGGER webhook_history_keys AFTER INSERT ON webhook_history
    REFERENCING NEW TABLE AS arrived
    FOR EACH STATEMENT EXECUTE FUNCTION dispatcher_history_keys();

-- A row leaving history (a replay, an edit through webhook_queue, a
-- delete, the default leaves' pruning) takes its key with it: the key
-- stands for a history row within the window, as history's own probe did.
-- Not the hot path: the outcome write only inserts.
CREATE OR REPLACE FUNCTION dispatcher_history_keys_gone() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    dead bigint;
BEGIN
    DELETE FROM dispatcher_dedup_keys_0 k USING gone g
    WHERE k.event_id = g.event_id AND k.endpoint_id = g.endpoint_id;
    DELETE FROM dispatcher_dedup_keys_1 k USING gone g
    WHERE k.event_id = g.event_id AND k.endpoint_id = g.endpoint_id;
    IF EXISTS (SELECT FROM gone WHERE status = 'dead_letter') THEN
        EXECUTE dispatcher_dead_deltas_insert('gone', -1) INTO dead;
        PERFORM dispatcher_count_dead(dead);
    END IF;
    RETURN NULL;
END $$;

CREATE OR REPLACE TRIGGER webhook_history_keys_gone AFTER DELETE ON webhook_history
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION dispatcher_history_keys_gone();

-- A TRUNCATE of history (a test's, an operator's clean slate) takes the
-- dead letters' count and buckets with it: no row trigger sees it.
CREATE OR REPLACE FUNCTION dispatcher_history_truncated() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM dead_letter_deltas;
    DELETE FROM dead_letter_buckets;
    DELETE FROM dispatcher_counts WHERE name = 'dead_letters';
    RETURN NULL;
END $$;

CREATE OR REPLACE TRIGGER webhook_history_truncated AFTER TRUNCATE ON webhook_history
    FOR EACH STATEMENT EXECUTE FUNCTION dispatcher_history_truncated();

-- Whether (event, endpoint) became final within the dedup window: its key,
-- or, until the keys of the rows history held before schema 027 are all
-- written (dispatcher_seed_dedup_keys), history itself. For statements
-- that ask once for many pairs (the bulk enqueue, the enqueue's rare
-- second look); the enqueue's first question, asked by every call, is
-- written out in dispatcher_enqueue_app, so that history is not even
-- planned once the keys are complete.
CREATE OR REPLACE FUNCTION dispatcher_dedup_taken(p_event_id text, p_endpoint_id bigint)
RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT EXISTS (SELECT 1 FROM dispatcher_dedup_keys k
                   WHERE k.event_id = p_event_id AND k.endpoint_id = p_endpoint_id
                     AND k.expires_at > now())
        OR (NOT (SELECT complete FROM dispatcher_dedup_seed)
            AND EXISTS (SELECT 1 FROM webhook_history h
                        WHERE h.event_id = p_event_id AND h.endpoint_id = p_endpoint_id
                          AND h.finished_at > dispatcher_dedup_since()))
$$;

-- The window kept by whole tables: once the current table has taken keys
-- for a window, every key in the other (written before the current one
-- opened) is past the window: that one is emptied (TRUNCATE) and becomes
-- current. A key is kept for one to two windows; its expires_at keeps the
-- answer exact (a key written under a longer window, since shortened,
-- answers until its table is emptied: at least the window now).
-- Run by the workers'
-- maintenance; a concurrent run finds the slot row changed and does
-- nothing; a table a reader holds is left for the next round
-- (lock_timeout: producers queue behind the TRUNCATE's lock for at most
-- that). Returns whether it rotated.
CREATE OR REPLACE FUNCTION dispatcher_rotate_dedup_keys() RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    cur dispatcher_dedup_slots;
    old dispatcher_dedup_slots;
BEGIN
    SELECT * INTO cur FROM dispatcher_dedup_slots ORDER BY opened_at DESC LIMIT 1;
    SELECT * INTO old FROM dispatcher_dedup_slots WHERE slot <> cur.slot;
    IF now() < cur.opened_at + dispatcher_dedup_window() THEN
        RETURN false;
    END IF;
    PERFORM set_config('lock_timeout', '200', true);
    PERFORM 1 FROM dispatcher_dedup_slots
    WHERE slot = old.slot AND opened_at = old.opened_at FOR UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    EXECUTE format('TRUNCATE %I', 'dispatcher_dedup_keys_' || old.slot);
    UPDATE dispatcher_dedup_slots SET opened_at = now() WHERE slot = old.slot;
    RETURN true;
EXCEPTION WHEN lock_not_available THEN
    RETURN false;
END $$;

-- One step of the keys of the rows history held before schema 027: those
-- that became final in the p_step_s seconds after where the last step
-- stopped (the window's start at first); once the steps pass now, the
-- keys are complete (every later row brought its own through the trigger)
-- and the enqueue stops asking history. Returns the keys written, NULL
-- once complete.
CREATE OR REPLACE FUNCTION dispatcher_seed_dedup_keys(p_step_s float8) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    s dispatcher_dedup_seed;
    v_from timestamptz;
    v_to timestamptz;
    n integer;
BEGIN
    SELECT * INTO s FROM dispatcher_dedup_seed FOR UPDATE SKIP LOCKED;
    IF NOT FOUND OR s.complete THEN
        RETURN NULL;
    END IF;
    v_from := greatest(coalesce(s.seeded_to, '-infinity'), dispatcher_dedup_since());
    v_to := CASE WHEN v_from + make_interval(secs => p_step_s) >= now() THEN 'infinity'
                 ELSE v_from + make_interval(secs => p_step_s) END;
    EXECUTE dispatcher_dedup_keys_insert('webhook_history')
        USING dispatcher_dedup_window(), v_from, v_to;
    GET DIAGNOSTICS n = ROW_COUNT;
    UPDATE dispatcher_dedup_seed SET seeded_to = v_to, complete = (v_to = 'infinity');
    RETURN n;
END $$;

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
