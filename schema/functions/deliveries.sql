-- The contract's `webhook_queue` (SPEC "Database contract"): a view over
-- the live queue, `webhook_live` (schema 025), and the history of final
-- rows, `webhook_history` (schema 026), whose payload is the row's own or
-- the event's one copy in event_payloads, and whose `finished_at` is when
-- a history row became final (NULL for a live one). Readers select from it
-- as from the table; the service's writers name the tables.
--
-- A view over two tables is not updatable by PostgreSQL itself, nor
-- locked through (FOR UPDATE is refused): the triggers below write through
-- it, so that a hand edit, a test, or an older release during a rolling
-- upgrade keep working. An UPDATE is a compare-and-swap: it changes a row
-- only if it is still as the statement read it (status, holder, attempts),
-- so two old workers claiming through the view cannot both have a row.
-- A row made final moves to history (webhook_live's trigger); a history
-- row edited back to a live status returns to webhook_live; a history row
-- edited is written again with its new finished_at. `payload` is written
-- only when the statement changes it (then inline). INSERT ... ON
-- CONFLICT needs the table (PostgreSQL infers no arbiter through a view).
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
       w.tracestate, w.payload_id, w.payload_at, NULL::timestamptz AS finished_at
FROM webhook_live w
UNION ALL
SELECT h.id, h.endpoint_id, h.event_id, h.event_type,
       coalesce(h.payload, (SELECT p.body FROM event_payloads p
                            WHERE p.id = h.payload_id AND p.created_at = h.payload_at)),
       h.status, h.attempt_count, h.max_attempts, h.created_at, h.next_attempt_at,
       h.delivered_at, h.updated_at, h.locked_by, h.last_error, h.last_status_code,
       h.last_response_ms, h.order_key, h.resent_at, h.payload_erased_at, h.traceparent,
       h.tracestate, h.payload_id, h.payload_at, h.finished_at
FROM webhook_history h;

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

-- A row of the view into webhook_live, whatever its status (a final one
-- moves on to history at once: webhook_live's trigger, history.sql).
-- Returns its finished_at.
CREATE OR REPLACE FUNCTION dispatcher_queue_put(r webhook_queue) RETURNS timestamptz
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO webhook_live (id, endpoint_id, event_id, event_type, payload, status,
        attempt_count, max_attempts, created_at, next_attempt_at, delivered_at, updated_at,
        locked_by, last_error, last_status_code, last_response_ms, order_key, resent_at,
        payload_erased_at, traceparent, tracestate, payload_id, payload_at)
    VALUES (r.id, r.endpoint_id, r.event_id, r.event_type, r.payload, r.status,
        r.attempt_count, r.max_attempts, r.created_at, r.next_attempt_at, r.delivered_at,
        r.updated_at, r.locked_by, r.last_error, r.last_status_code, r.last_response_ms,
        r.order_key, r.resent_at, r.payload_erased_at, r.traceparent, r.tracestate,
        r.payload_id, r.payload_at);
    RETURN dispatcher_finished_at(r.status, r.delivered_at, r.updated_at);
END $$;

CREATE OR REPLACE FUNCTION dispatcher_queue_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.finished_at := dispatcher_queue_put(NEW);
    RETURN NEW;
END $$;

CREATE OR REPLACE FUNCTION dispatcher_queue_update() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_inline boolean := NEW.payload::text IS DISTINCT FROM OLD.payload::text;
    r webhook_queue := NEW;
BEGIN
    IF OLD.finished_at IS NULL THEN
        UPDATE webhook_live w
        SET id = NEW.id, endpoint_id = NEW.endpoint_id, event_id = NEW.event_id,
            event_type = NEW.event_type,
            payload = CASE WHEN v_inline THEN NEW.payload ELSE w.payload END,
            status = NEW.status, attempt_count = NEW.attempt_count,
            max_attempts = NEW.max_attempts, created_at = NEW.created_at,
            next_attempt_at = NEW.next_attempt_at, delivered_at = NEW.delivered_at,
            updated_at = NEW.updated_at, locked_by = NEW.locked_by, last_error = NEW.last_error,
            last_status_code = NEW.last_status_code, last_response_ms = NEW.last_response_ms,
            order_key = NEW.order_key, resent_at = NEW.resent_at,
            payload_erased_at = NEW.payload_erased_at, traceparent = NEW.traceparent,
            tracestate = NEW.tracestate,
            payload_id = CASE WHEN v_inline THEN NULL ELSE NEW.payload_id END,
            payload_at = CASE WHEN v_inline THEN NULL ELSE NEW.payload_at END
        WHERE w.id = OLD.id AND w.status = OLD.status
          AND w.locked_by IS NOT DISTINCT FROM OLD.locked_by
          AND w.attempt_count = OLD.attempt_count;
        IF NOT FOUND THEN
            RETURN NULL;
        END IF;
        NEW.finished_at := dispatcher_finished_at(NEW.status, NEW.delivered_at, NEW.updated_at);
        RETURN NEW;
    END IF;
    -- A history row: out, and back in through webhook_live, to stay there
    -- or to go on to history with its new finished_at. Its payload is its
    -- own (inline, or the reference) unless the statement set one.
    DELETE FROM webhook_history h
    WHERE h.id = OLD.id AND h.status = OLD.status AND h.finished_at = OLD.finished_at
    RETURNING h.payload INTO r.payload;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF v_inline THEN
        r.payload := NEW.payload;
        r.payload_id := NULL;
        r.payload_at := NULL;
    END IF;
    NEW.finished_at := dispatcher_queue_put(r);
    RETURN NEW;
END $$;

CREATE OR REPLACE FUNCTION dispatcher_queue_delete() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.finished_at IS NULL THEN
        DELETE FROM webhook_live WHERE id = OLD.id;
    ELSE
        DELETE FROM webhook_history
        WHERE id = OLD.id AND status = OLD.status AND finished_at = OLD.finished_at;
    END IF;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    RETURN OLD;
END $$;

CREATE OR REPLACE TRIGGER webhook_queue_insert INSTEAD OF INSERT ON webhook_queue
    FOR EACH ROW EXECUTE FUNCTION dispatcher_queue_insert();
CREATE OR REPLACE TRIGGER webhook_queue_update INSTEAD OF UPDATE ON webhook_queue
    FOR EACH ROW EXECUTE FUNCTION dispatcher_queue_update();
CREATE OR REPLACE TRIGGER webhook_queue_delete INSTEAD OF DELETE ON webhook_queue
    FOR EACH ROW EXECUTE FUNCTION dispatcher_queue_delete();

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
