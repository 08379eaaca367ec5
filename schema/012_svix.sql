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

-- Channels and deliverAt in the fan-out (dispatcher_enqueue_app):
-- schema/functions/queue.sql. Workers refresh their endpoints when one
-- changes (the endpoints_changed and endpoint_secrets_changed triggers):
-- schema/functions/triggers.sql.
