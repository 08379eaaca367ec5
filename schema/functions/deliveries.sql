-- The contract's `webhook_queue` (SPEC "Database contract"): since schema
-- 025 a view over the queue's table, `webhook_live`, whose payload is the
-- row's own or the event's one copy in event_payloads. Readers select from
-- it as from the table; the service's writers name webhook_live.
--
-- A simple view, so PostgreSQL updates and deletes through it, and locks
-- through it (FOR UPDATE SKIP LOCKED), as it would the table: a hand
-- edit, a test, or an older release during a rolling upgrade keep
-- working. `payload` is computed, so it cannot be updated through the view
-- (erasure has its own calls); an INSERT naming it goes through the
-- trigger below, which keeps the payload inline. INSERT ... ON CONFLICT
-- needs the table (PostgreSQL does not infer an arbiter through a view
-- with an INSTEAD OF trigger).
--
-- The payload's sub-select is evaluated only when the column is read and
-- the row has no inline payload, and touches one day of event_payloads
-- (run-time pruning on payload_at).
CREATE OR REPLACE VIEW webhook_queue AS
SELECT w.id, w.endpoint_id, w.event_id, w.event_type,
       coalesce(w.payload, (SELECT p.body FROM event_payloads p
                            WHERE p.id = w.payload_id AND p.created_at = w.payload_at))
           AS payload,
       w.status, w.attempt_count, w.max_attempts, w.created_at, w.next_attempt_at,
       w.delivered_at, w.updated_at, w.locked_by, w.last_error, w.last_status_code,
       w.last_response_ms, w.order_key, w.resent_at, w.payload_erased_at, w.traceparent,
       w.tracestate, w.payload_id, w.payload_at
FROM webhook_live w;

-- An INSERT through the view fills what it omits as the table would.
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT a.attname, pg_get_expr(d.adbin, d.adrelid) AS expr
        FROM pg_attrdef d
        JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
        WHERE d.adrelid = 'webhook_live'::regclass
    LOOP
        EXECUTE format('ALTER VIEW webhook_queue ALTER COLUMN %I SET DEFAULT %s',
                       r.attname, r.expr);
    END LOOP;
END $$;

-- The view's columns are the table's, in its order.
CREATE OR REPLACE FUNCTION dispatcher_queue_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO webhook_live SELECT NEW.*;
    RETURN NEW;
END $$;

CREATE OR REPLACE TRIGGER webhook_queue_insert INSTEAD OF INSERT ON webhook_queue
    FOR EACH ROW EXECUTE FUNCTION dispatcher_queue_insert();

-- A payload, inline or by reference: the view's rule for the reads that
-- are not of the view (a Svix message, a replay's check that there is
-- still something to send). Not inlined (a sub-select): off the hot paths
-- only, where the claim and the view write the sub-select out.
CREATE OR REPLACE FUNCTION dispatcher_payload(p_inline json, p_id bigint, p_at timestamptz)
RETURNS json
LANGUAGE sql STABLE AS $$
    SELECT coalesce(p_inline, (SELECT p.body FROM event_payloads p
                               WHERE p.id = p_id AND p.created_at = p_at))
$$;
