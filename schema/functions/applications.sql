-- What the applications' (tenants') rules compute in SQL: the events
-- quota's token bucket (schema 009) and the event-type catalogue's choice
-- of the schema a payload is checked against (schema 010).
--
-- Functions here are defined once and edited in place: `dispatcher
-- migrate` re-applies this file when its text changes (CONTRIBUTING.md,
-- "Changing the schema").

-- The events quota's bucket level now, from the level at event_tokens_at
-- on the application's row (NULL: full): capacity max(1, rate), refilled
-- at rate per second by the database's clock, so that the quota holds
-- across API processes (queries.sql: take_event_tokens). Inlined into the
-- statement that calls it.
CREATE OR REPLACE FUNCTION dispatcher_bucket_level(p_tokens float8, p_at timestamptz, p_rate float8)
RETURNS float8 LANGUAGE sql STABLE AS $$
    SELECT least(greatest(1, p_rate),
                 coalesce(p_tokens, greatest(1, p_rate))
                 + p_rate * greatest(0, extract(epoch FROM statement_timestamp()
                                                - coalesce(p_at, statement_timestamp())))::float8)
$$;

-- The version of an event type's `schemas` (Svix's shape: a map of version
-- "1", "2", … to a draft 2020-12 schema) that payloads are checked
-- against: the highest-numbered key.
CREATE OR REPLACE FUNCTION dispatcher_latest_schema(p_schemas jsonb) RETURNS jsonb
LANGUAGE sql IMMUTABLE STRICT AS $$
    SELECT value FROM jsonb_each(p_schemas)
    WHERE key ~ '^[0-9]{1,9}$' ORDER BY key::int DESC LIMIT 1
$$;
