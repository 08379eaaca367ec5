-- migrate: with functions
-- The dedup window's keys (issue 31): an event id stays taken for the
-- window after its delivery became final (SPEC "History, payloads and
-- retention"). Since 026 the enqueue asked history for it; a statement
-- over a partitioned table locks every leaf at executor start (PostgreSQL
-- 15, generic plans), past the 16 fast-path slots, and a producer's
-- enqueue paid 10-30 % for a question whose answer is nearly always "no".
-- Here each final delivery leaves its (event id, endpoint) and when that
-- key expires in one of two small tables, written by a statement trigger
-- on history's inserts (every path into history, this release's code or
-- an older one's), and the window is kept by emptying a whole table
-- (TRUNCATE: no dead rows, no delete walk): dispatcher_rotate_dedup_keys
-- (schema/functions/history.sql). Two plain tables rather than a
-- partitioned one: the enqueue's probe locks four relations, not seven.

-- The trigger on history (history.sql, applied at the end of this
-- transaction) takes SHARE ROW EXCLUSIVE on it; the functions' triggers on
-- webhook_live take the same there. Both taken first, the queue's table
-- before history (the order the outcome write takes them): producers and
-- workers wait the milliseconds this takes, no weaker lock is upgraded
-- under them, and no row reaches history before its trigger exists.
-- Nothing here takes a stronger lock on a table they read.
LOCK TABLE webhook_live IN SHARE ROW EXCLUSIVE MODE;
LOCK TABLE webhook_history IN SHARE ROW EXCLUSIVE MODE;

CREATE TABLE dispatcher_dedup_keys_0 (
    event_id    text NOT NULL,
    endpoint_id bigint NOT NULL,
    expires_at  timestamptz NOT NULL
);
CREATE INDEX dispatcher_dedup_keys_0_idx ON dispatcher_dedup_keys_0 (event_id, endpoint_id);
CREATE TABLE dispatcher_dedup_keys_1 (LIKE dispatcher_dedup_keys_0);
CREATE INDEX dispatcher_dedup_keys_1_idx ON dispatcher_dedup_keys_1 (event_id, endpoint_id);

-- Which table takes the keys: the one opened last.
CREATE TABLE dispatcher_dedup_slots (
    slot      smallint PRIMARY KEY CHECK (slot IN (0, 1)),
    opened_at timestamptz NOT NULL
);
INSERT INTO dispatcher_dedup_slots VALUES (0, now()), (1, '-infinity');

-- Whether every history row within the window has its key. Rows already
-- in history (a database that ran 026) get theirs from the workers'
-- maintenance (dispatcher_seed_dedup_keys, from `seeded_to` on); until
-- then the enqueue asks history too, as 026 did. A table of its own, not
-- columns of dispatcher_settings: an ALTER there would lock what
-- producers and the maintenance read while they hold the queue's table.
CREATE TABLE dispatcher_dedup_seed (
    one_row   boolean PRIMARY KEY DEFAULT true CHECK (one_row),
    complete  boolean NOT NULL,
    seeded_to timestamptz
);
INSERT INTO dispatcher_dedup_seed (complete)
SELECT NOT EXISTS (SELECT 1 FROM webhook_history);
