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

-- The enqueue functions for one application (dispatcher_enqueue_app,
-- dispatcher_enqueue for `default` or an endpoint's application) and the
-- argument checks they share: schema/functions/queue.sql.
