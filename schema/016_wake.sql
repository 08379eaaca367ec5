-- Wake-up chosen per deployment (issue 26). `probe` (the default, and what
-- every deployment did before): producers commit without NOTIFY and each
-- idle worker probes for new rows every 10 ms (schema 005). `notify`: the
-- enqueue functions NOTIFY dispatcher_due once per call that queued
-- something due, and idle workers do not probe at all. A NOTIFY takes one
-- server-wide lock at commit and keeps it through the WAL flush, so
-- producers' commits run one at a time: right for up to a few thousand
-- producer commits a second, wrong past that (docs/operations/scaling.md).
--
-- A table, not a GUC: the enqueue functions of sessions already open see a
-- change at their next call, and workers hear of it on the channel that
-- wakes their refresh. Reading it costs a producer a scan of a one-row
-- table per call that queued something: a few microseconds, against about
-- 150 for the enqueue function and milliseconds for its commit.

CREATE TABLE dispatcher_settings (
    one_row boolean PRIMARY KEY DEFAULT true CHECK (one_row),
    wake text NOT NULL DEFAULT 'probe' CHECK (wake IN ('notify', 'probe')),
    updated_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO dispatcher_settings DEFAULT VALUES;

-- Workers re-read it at once (the settings_changed trigger), and the
-- enqueue and release functions NOTIFY by it (dispatcher_wake_workers):
-- schema/functions/triggers.sql and queue.sql.
