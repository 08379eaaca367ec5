-- The event-type catalogue (SPEC "Event types"): names, descriptions and,
-- optionally, the JSON Schema payloads of a type must match at enqueue.
--
-- application_id NULL is the catalogue-wide scope, shared by every
-- application; otherwise the type is that application's own. A name is
-- unique per scope (NULLS NOT DISTINCT: one catalogue-wide row per name),
-- and an application's own type shadows a catalogue-wide one of the same
-- name when its events are checked.
--
-- `schemas` is Svix's shape, a map of version ("1", "2", …) to a draft
-- 2020-12 schema, so that the Svix-compatible API can answer it as stored;
-- our own API reads and writes one version, and payloads are checked
-- against the highest-numbered one (dispatcher_latest_schema).
--
-- What this costs on a live system: a new table; nothing existing is
-- touched or locked.
CREATE TABLE event_types (
    id             bigserial PRIMARY KEY,
    application_id text REFERENCES applications (id) ON DELETE CASCADE,
    -- PostgreSQL's regular expressions count repetitions only up to 255.
    name           text NOT NULL
                   CHECK (name ~ '^[A-Za-z0-9_.-]+$' AND length(name) <= 256),
    description    text NOT NULL DEFAULT '' CHECK (length(description) <= 2000),
    schemas        jsonb CHECK (schemas IS NULL OR jsonb_typeof(schemas) = 'object'),
    archived_at    timestamptz,
    feature_flag   text CHECK (feature_flag ~ '^[A-Za-z0-9_.-]+$' AND length(feature_flag) <= 256),
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    -- The enqueue path's one lookup: by name, then at most two rows (the
    -- application's and the catalogue-wide one).
    CONSTRAINT event_types_scope_name UNIQUE NULLS NOT DISTINCT (name, application_id)
);

-- The version checked (dispatcher_latest_schema): schema/functions/applications.sql.
