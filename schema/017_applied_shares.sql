-- Limits hold across processes from the first request (issue 26): schema 015
-- tells the workers at once that one joined, but until each has re-read the
-- membership, the old ones still use their larger shares while the newcomer
-- already uses its own. Each worker now publishes the membership whose
-- shares it keeps to (applied_members, sorted worker ids; NULL: registered,
-- holding nothing yet), and takes only what the others' applied shares
-- leave free (dispatcher/core/shares.py): a newcomer sends nothing until
-- every other live worker has shrunk to its share of a membership with it.
-- A worker that publishes a new one tells the others at once, so the
-- newcomer grows within milliseconds; heartbeats that change nothing
-- notify no one.
ALTER TABLE dispatcher_workers ADD COLUMN applied_members text[];

-- The trigger that tells the others (workers_applied): schema/functions/triggers.sql.
