-- Producers commit without NOTIFY. A transaction that NOTIFYs takes one
-- lock for the whole server at commit and holds it through the WAL flush,
-- so concurrent producers' commits ran one at a time (no group commit):
-- 16 producers reached a quarter of a plain INSERT's rate. Workers now learn
-- of new rows by a cheap probe while idle (see dispatcher/prober.py); the
-- LISTEN channel stays for rare operator actions (replay, enable).
-- So the trigger that NOTIFYed once per insert statement goes, with its
-- function: schema 001 created them, in the databases migrated before the
-- functions moved to schema/functions/. The enqueue functions are in
-- schema/functions/queue.sql.
DROP TRIGGER IF EXISTS webhook_queue_notify ON webhook_queue;
DROP FUNCTION IF EXISTS dispatcher_notify_due();

-- Where autovacuum runs, it should visit the hot tables long before the
-- default 20 % of dead rows: every delivery leaves two or three dead
-- versions behind. Where it is off, the worker's maintenance vacuums them
-- itself (dispatcher/vacuum.py).
ALTER TABLE webhook_queue SET (
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 5000,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_insert_scale_factor = 0.05
);
ALTER TABLE endpoint_latency SET (
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_threshold = 5000,
    autovacuum_vacuum_insert_scale_factor = 0.05
);
