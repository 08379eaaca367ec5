-- The Svix-compatible API (SPEC "The Svix-compatible API"): what Svix's
-- applications, endpoints and messages carry that ours did not, the
-- messages themselves, channels and deliverAt in the fan-out, and
-- idempotency keys that hold across processes.

-- An application's `uid` is the caller's own name for it (Svix: get by id
-- or uid). When it fits our id syntax it is also the id.
ALTER TABLE applications
    ADD COLUMN uid text UNIQUE CHECK (uid ~ '^[a-zA-Z0-9_.-]+$' AND length(uid) <= 256),
    ADD COLUMN metadata jsonb NOT NULL DEFAULT '{}',
    ADD COLUMN updated_at timestamptz NOT NULL DEFAULT now(),
    -- Deleted through the Svix API: its endpoints are deleted, its
    -- credentials gone; the row stays for the history that refers to it.
    ADD COLUMN deleted_at timestamptz;

-- channels: NULL gets every message its subscriptions match; a list gets
-- only messages sent to one of those channels (Svix's rule).
ALTER TABLE endpoints
    ADD COLUMN uid text CHECK (uid ~ '^[a-zA-Z0-9_.-]+$' AND length(uid) <= 256 AND uid !~ '^[0-9]+$'),
    ADD COLUMN metadata jsonb NOT NULL DEFAULT '{}',
    ADD COLUMN channels text[];
CREATE UNIQUE INDEX endpoints_uid_idx ON endpoints (application_id, uid)
    WHERE uid IS NOT NULL AND deleted_at IS NULL;

-- One row per message sent through the Svix API: its id is the event id of
-- its deliveries (webhook_queue.event_id), so a message is found by either.
-- Events enqueued otherwise (CLI, /v1/events, SQL) have no row here and
-- are answered from their deliveries. `event_id` is set when the caller
-- gave one (then equal to id): a second message with it is a conflict.
CREATE TABLE messages (
    application_id text NOT NULL REFERENCES applications (id) ON DELETE CASCADE,
    id             text NOT NULL,
    event_id       text,
    event_type     text NOT NULL,
    payload        json NOT NULL,
    channels       text[],
    tags           text[],
    deliver_at     timestamptz,
    created_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (application_id, id)
);
CREATE INDEX messages_created_idx ON messages (application_id, created_at, id);

-- When a delivery was last sent again by hand (Svix's resend): its
-- attempts from then on are "manual". Nullable, so adding it rewrites
-- nothing, and the delivery path never writes it.
ALTER TABLE webhook_queue ADD COLUMN resent_at timestamptz;

-- An idempotency key's first answer, per caller (the admin, or one
-- application), kept 24 h. `status` NULL: the first request is still running.
CREATE TABLE idempotency_keys (
    scope        text NOT NULL,
    key          text NOT NULL,
    request_hash bytea NOT NULL,
    status       integer,
    body         bytea,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (scope, key)
);
CREATE INDEX idempotency_keys_created_idx ON idempotency_keys USING brin (created_at);

-- dispatcher_enqueue_app (011: targets of kind 'webhook' only) with
-- channels and a delivery time. The old
-- signature goes: one function, so that named arguments resolve.
DROP FUNCTION dispatcher_enqueue_app(text, text, json, text, bigint);
CREATE FUNCTION dispatcher_enqueue_app(
    p_app text,
    p_event_type text,
    p_payload json,
    p_event_id text DEFAULT NULL,
    p_endpoint_id bigint DEFAULT NULL,
    channels text[] DEFAULT NULL,
    deliver_at timestamptz DEFAULT NULL
) RETURNS bigint[]
LANGUAGE plpgsql AS $$
DECLARE
    v_event_id text := coalesce(p_event_id, 'evt_' || replace(gen_random_uuid()::text, '-', ''));
    v_ids bigint[];
    v_new boolean;
    v_targets bigint;
    v_channels text[] := channels;
    v_due timestamptz := coalesce(deliver_at, now());
BEGIN
    PERFORM dispatcher_check_event(p_event_type, v_event_id, p_payload);
    WITH target AS MATERIALIZED (
        SELECT e.id, e.max_attempts,
               dispatcher_order_key(e.ordering, e.ordering_key, p_payload) AS order_key
        FROM endpoints e
        WHERE e.deleted_at IS NULL AND e.application_id = p_app AND e.kind = 'webhook'
          AND CASE WHEN p_endpoint_id IS NULL
                   THEN e.enabled AND (e.event_types @> ARRAY[p_event_type] OR e.event_types @> '{*}')
                        AND dispatcher_filter_passes(e.filter, p_payload)
                        AND (e.channels IS NULL OR e.channels && v_channels)
                   ELSE e.id = p_endpoint_id END
    ), ins AS (
        INSERT INTO webhook_queue (endpoint_id, event_id, event_type, payload, max_attempts,
                                   order_key, next_attempt_at)
        SELECT t.id, v_event_id, p_event_type, p_payload, t.max_attempts, t.order_key, v_due
        FROM target t
        ON CONFLICT (endpoint_id, event_id) DO NOTHING
        RETURNING id
    )
    SELECT coalesce(array_agg(id ORDER BY id), '{}'),
           (SELECT count(*) FROM target),
           count(*) = (SELECT count(*) FROM target)
           AND NOT (p_event_id IS NOT NULL
                    AND EXISTS (SELECT 1 FROM webhook_queue q
                                JOIN endpoints o ON o.id = q.endpoint_id
                                WHERE q.event_id = v_event_id AND o.application_id = p_app
                                  AND o.kind = 'webhook'))
    INTO v_ids, v_targets, v_new
    FROM ins;
    IF v_targets = 0 THEN
        IF NOT EXISTS (SELECT 1 FROM applications WHERE id = p_app) THEN
            RAISE EXCEPTION 'unknown application: %', p_app USING ERRCODE = '22023';
        END IF;
        IF p_endpoint_id IS NOT NULL AND EXISTS (
            SELECT 1 FROM endpoints WHERE id = p_endpoint_id AND deleted_at IS NULL
              AND kind = 'webhook' AND application_id <> p_app) THEN
            RAISE EXCEPTION 'endpoint % is not in application %', p_endpoint_id, p_app
                USING ERRCODE = '22023';
        END IF;
    END IF;
    IF v_new THEN
        RETURN v_ids;
    END IF;
    SELECT coalesce(array_agg(q.id ORDER BY q.id), '{}') INTO v_ids
    FROM webhook_queue q JOIN endpoints e ON e.id = q.endpoint_id
    WHERE q.event_id = v_event_id
      AND e.deleted_at IS NULL AND e.application_id = p_app AND e.kind = 'webhook'
      AND CASE WHEN p_endpoint_id IS NULL
               THEN e.event_types @> ARRAY[p_event_type] OR e.event_types @> '{*}'
               ELSE e.id = p_endpoint_id END;
    RETURN v_ids;
END $$;

-- Workers refresh their endpoints when one changes (a rotated secret signs
-- the next request, not the one after the next refresh). Per row, so a
-- statement that changes nothing (maintenance's prune of expired secrets)
-- wakes no one; the delivery path never writes these tables, and one
-- transaction's notifications fold into one.
CREATE FUNCTION dispatcher_endpoints_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('dispatcher_endpoints', '');
    RETURN NULL;
END $$;
CREATE TRIGGER endpoints_changed AFTER INSERT OR UPDATE OR DELETE ON endpoints
    FOR EACH ROW EXECUTE FUNCTION dispatcher_endpoints_changed();
CREATE TRIGGER endpoint_secrets_changed AFTER INSERT OR UPDATE OR DELETE ON endpoint_secrets
    FOR EACH ROW EXECUTE FUNCTION dispatcher_endpoints_changed();
