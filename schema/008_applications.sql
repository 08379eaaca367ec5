-- Applications (tenants): each customer of a team that sends webhooks gets
-- one; its endpoints, deliveries and credentials are its own.
--
-- What this costs on a live system: webhook_queue is not touched at all (a
-- delivery's application is its endpoint's), so 10 million queued rows cost
-- nothing here. endpoints gains a column with a constant default (catalog
-- only, no rewrite) and a foreign key, validated by one scan of endpoints;
-- the ACCESS EXCLUSIVE lock on endpoints that ALTER TABLE takes is held for
-- that scan (milliseconds for thousands of endpoints), during which
-- producers' dispatcher_enqueue calls wait.
CREATE TABLE applications (
    id         text PRIMARY KEY CHECK (id ~ '^[a-z0-9_-]{1,64}$'),
    name       text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    created_at timestamptz NOT NULL DEFAULT now()
);

INSERT INTO applications (id, name) VALUES ('default', 'default');

ALTER TABLE endpoints
    ADD COLUMN application_id text NOT NULL DEFAULT 'default' REFERENCES applications (id);

CREATE INDEX endpoints_application_idx ON endpoints (application_id, id);

-- What a customer's portal shows per endpoint beside p95: the last hour's
-- attempts and 2xx answers, stored by the percentile refresh (which scans
-- the window anyway) so that a polling page reads, not counts.
ALTER TABLE endpoint_health
    ADD COLUMN attempts_last_hour integer NOT NULL DEFAULT 0,
    ADD COLUMN successes_last_hour integer NOT NULL DEFAULT 0;

-- Credentials are kept only as SHA-256 digests of high-entropy random
-- strings (256 bits): what is stored cannot be used to sign in.
CREATE TABLE application_tokens (
    id             bigserial PRIMARY KEY,
    application_id text NOT NULL REFERENCES applications (id) ON DELETE CASCADE,
    token_hash     bytea NOT NULL UNIQUE,
    created_at     timestamptz NOT NULL DEFAULT now(),
    expires_at     timestamptz,
    revoked_at     timestamptz
);

-- One-time portal sign-in codes.
CREATE TABLE portal_codes (
    code_hash      bytea PRIMARY KEY,
    application_id text NOT NULL REFERENCES applications (id) ON DELETE CASCADE,
    created_at     timestamptz NOT NULL DEFAULT now(),
    expires_at     timestamptz NOT NULL,
    used_at        timestamptz
);

-- Portal sessions live in the database, not in one server's memory: a
-- customer signed in through one admin process may be served by another.
CREATE TABLE portal_sessions (
    session_hash   bytea PRIMARY KEY,
    application_id text NOT NULL REFERENCES applications (id) ON DELETE CASCADE,
    created_at     timestamptz NOT NULL DEFAULT now(),
    expires_at     timestamptz NOT NULL
);

-- The argument checks every enqueue function makes, once: the next
-- migration that changes an enqueue function calls this instead of
-- restating them.
CREATE FUNCTION dispatcher_check_event(p_event_type text, p_event_id text, p_payload json)
RETURNS void LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF p_event_type IS NULL OR p_event_type = '' OR length(p_event_type) > 200 THEN
        RAISE EXCEPTION 'event_type must be 1..200 characters' USING ERRCODE = '22023';
    END IF;
    IF length(p_event_id) NOT BETWEEN 1 AND 200 THEN
        RAISE EXCEPTION 'event_id must be 1..200 characters' USING ERRCODE = '22023';
    END IF;
    IF p_payload IS NULL THEN
        RAISE EXCEPTION 'payload must not be null' USING ERRCODE = '22023';
    END IF;
    IF octet_length(p_payload::text) >
       coalesce(nullif(current_setting('dispatcher.max_payload_bytes', true), '')::int, 262144) THEN
        RAISE EXCEPTION 'payload is over the size limit' USING ERRCODE = '22023';
    END IF;
END $$;

-- dispatcher_enqueue (007) for one application: only its endpoints are
-- targets, and an event id is unique within it (another application may
-- use the same id for its own event). An endpoint given by id must be the
-- application's. An unknown application raises and inserts nothing; it is
-- looked up only when nothing was targeted, so the common path pays no
-- extra read.
CREATE FUNCTION dispatcher_enqueue_app(
    p_app text,
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
    v_targets bigint;
BEGIN
    PERFORM dispatcher_check_event(p_event_type, v_event_id, p_payload);
    WITH target AS MATERIALIZED (
        SELECT e.id, e.max_attempts,
               dispatcher_order_key(e.ordering, e.ordering_key, p_payload) AS order_key
        FROM endpoints e
        WHERE e.deleted_at IS NULL AND e.application_id = p_app
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
           (SELECT count(*) FROM target),
           -- Every target got its row (none was there already, or being
           -- inserted by a concurrent call) and no other row of this
           -- application has this id.
           count(*) = (SELECT count(*) FROM target)
           AND NOT (p_event_id IS NOT NULL
                    AND EXISTS (SELECT 1 FROM webhook_queue q
                                JOIN endpoints o ON o.id = q.endpoint_id
                                WHERE q.event_id = v_event_id AND o.application_id = p_app))
    INTO v_ids, v_targets, v_new
    FROM ins;
    IF v_targets = 0 THEN
        IF NOT EXISTS (SELECT 1 FROM applications WHERE id = p_app) THEN
            RAISE EXCEPTION 'unknown application: %', p_app USING ERRCODE = '22023';
        END IF;
        IF p_endpoint_id IS NOT NULL AND EXISTS (
            SELECT 1 FROM endpoints WHERE id = p_endpoint_id AND deleted_at IS NULL
              AND application_id <> p_app) THEN
            RAISE EXCEPTION 'endpoint % is not in application %', p_endpoint_id, p_app
                USING ERRCODE = '22023';
        END IF;
    END IF;
    IF v_new THEN
        RETURN v_ids;
    END IF;
    -- Idempotent: a repeated event id answers with the deliveries it has.
    SELECT coalesce(array_agg(q.id ORDER BY q.id), '{}') INTO v_ids
    FROM webhook_queue q JOIN endpoints e ON e.id = q.endpoint_id
    WHERE q.event_id = v_event_id
      AND e.deleted_at IS NULL AND e.application_id = p_app
      AND CASE WHEN p_endpoint_id IS NULL
               THEN e.event_types @> ARRAY[p_event_type] OR e.event_types @> '{*}'
               ELSE e.id = p_endpoint_id END;
    RETURN v_ids;
END $$;

-- The outbox call of one application's producers: `default`, or with an
-- endpoint given by id, that endpoint's application. plpgsql rather than a
-- SQL wrapper: its plan is cached per session, where a SQL function that
-- cannot be inlined is planned again by every call (a quarter of a
-- producer's transaction rate, measured with pgbench).
CREATE OR REPLACE FUNCTION dispatcher_enqueue(
    p_event_type text,
    p_payload json,
    p_event_id text DEFAULT NULL,
    p_endpoint_id bigint DEFAULT NULL
) RETURNS bigint[]
LANGUAGE plpgsql AS $$
DECLARE
    v_app text;
BEGIN
    IF p_endpoint_id IS NOT NULL THEN
        SELECT application_id INTO v_app FROM endpoints
        WHERE id = p_endpoint_id AND deleted_at IS NULL;
    END IF;
    RETURN dispatcher_enqueue_app(coalesce(v_app, 'default'), p_event_type, p_payload,
                                  p_event_id, p_endpoint_id);
END $$;
