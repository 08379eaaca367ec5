-- migrate: with functions
-- Insert-only history (issue 31, SPEC "History, payloads and retention"):
-- a delivery's row leaves `webhook_live` when it becomes final (delivered,
-- dead letter, cancelled) and enters `webhook_history`, in the statement
-- that makes it final. The claim's table then holds only what is still to
-- be sent, whatever a week of traffic left behind, and retention drops
-- whole partitions of history instead of deleting rows.
--
-- webhook_history is partitioned by final status (each status has its own
-- retention), each status by the time it became final (`finished_at`), in
-- leaves made ahead and dropped by dispatcher_day_partitions
-- (schema/functions/partitions.sql). A default leaf per status takes what
-- falls outside the leaves (a clock far off, rows written back-dated) and
-- is pruned by bounded deletes.
--
-- Its columns are webhook_live's, in its order, then finished_at: one
-- mapping, dispatcher_settle (schema/functions/history.sql), writes them.
-- A column added to webhook_live is added here in the same migration.
--
-- `webhook_queue` becomes a view over both (schema/functions/deliveries.sql).
-- The final rows already in webhook_live move in the background, in
-- batches of ids up to the highest id there now (dispatcher_history_backfill),
-- by `dispatcher migrate` and by the workers' maintenance: readers of the
-- view see every row in either place meanwhile.
-- The strongest lock this transaction takes on the queue's table (the
-- triggers below), taken first: producers' transactions finish, new ones
-- wait the milliseconds this takes, and no weaker lock is upgraded under
-- them (a deadlock).
LOCK TABLE webhook_live IN SHARE ROW EXCLUSIVE MODE;

CREATE TABLE webhook_history (
    id                bigint NOT NULL,
    endpoint_id       bigint NOT NULL,
    event_id          text NOT NULL,
    event_type        text NOT NULL,
    payload           json,
    status            text NOT NULL,
    attempt_count     integer NOT NULL,
    max_attempts      integer NOT NULL,
    created_at        timestamptz NOT NULL,
    next_attempt_at   timestamptz NOT NULL,
    delivered_at      timestamptz,
    updated_at        timestamptz NOT NULL,
    locked_by         text,
    last_error        text,
    last_status_code  integer,
    last_response_ms  integer,
    order_key         text,
    resent_at         timestamptz,
    payload_erased_at timestamptz,
    traceparent       text,
    tracestate        text,
    payload_id        bigint,
    payload_at        timestamptz,
    finished_at       timestamptz NOT NULL
) PARTITION BY LIST (status);
CREATE TABLE webhook_history_delivered PARTITION OF webhook_history
    FOR VALUES IN ('delivered') PARTITION BY RANGE (finished_at);
CREATE TABLE webhook_history_dead PARTITION OF webhook_history
    FOR VALUES IN ('dead_letter') PARTITION BY RANGE (finished_at);
CREATE TABLE webhook_history_cancelled PARTITION OF webhook_history
    FOR VALUES IN ('cancelled') PARTITION BY RANGE (finished_at);
CREATE TABLE webhook_history_delivered_default PARTITION OF webhook_history_delivered DEFAULT;
CREATE TABLE webhook_history_dead_default PARTITION OF webhook_history_dead DEFAULT;
CREATE TABLE webhook_history_cancelled_default PARTITION OF webhook_history_cancelled DEFAULT;

-- The live table's read indexes, per leaf: a delivery by id, an event's
-- deliveries (and the dedup window's probe), the browser per endpoint,
-- the timeline by time; the dead letters' lists and replays.
CREATE INDEX webhook_history_id_idx ON webhook_history (id);
CREATE INDEX webhook_history_event_idx ON webhook_history (event_id, endpoint_id);
CREATE INDEX webhook_history_browse_idx ON webhook_history (endpoint_id, id);
CREATE INDEX webhook_history_created_brin ON webhook_history USING brin (created_at);
CREATE INDEX webhook_history_finished_brin ON webhook_history USING brin (finished_at);
CREATE INDEX webhook_history_dead_newest_idx ON webhook_history_dead (updated_at DESC, id DESC);
CREATE INDEX webhook_history_dead_endpoint_idx ON webhook_history_dead (endpoint_id, updated_at);

-- Where the move of the rows final before this migration has got to.
CREATE TABLE dispatcher_history_backfill (
    one_row  boolean PRIMARY KEY DEFAULT true CHECK (one_row),
    upto     bigint NOT NULL,
    cursor   bigint NOT NULL DEFAULT 0,
    done_at  timestamptz
);
INSERT INTO dispatcher_history_backfill (upto, done_at)
SELECT coalesce(max(id), 0), CASE WHEN max(id) IS NULL THEN now() END FROM webhook_live;

-- How long an event id stays taken against history (DISPATCHER_DEDUP_WINDOW_S,
-- written by the workers' maintenance): the enqueue functions read it here,
-- whoever's connection calls them.
ALTER TABLE dispatcher_settings ADD COLUMN dedup_window_s float8 NOT NULL DEFAULT 86400
    CHECK (dedup_window_s > 0);

-- A queue's table: its dead versions are vacuumed long before they count
-- for a fifth of it (the default), since every claim updates its rows.
ALTER TABLE webhook_live SET (autovacuum_vacuum_scale_factor = 0.01,
                              autovacuum_vacuum_threshold = 1000,
                              autovacuum_vacuum_cost_delay = 1);

-- Now made with a width and a start (partitions.sql).
DROP FUNCTION IF EXISTS dispatcher_day_partitions(text, integer, float8);
