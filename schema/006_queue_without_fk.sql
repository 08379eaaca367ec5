-- Producers' inserts no longer lock the endpoint row. A foreign key check
-- takes FOR KEY SHARE on the referenced endpoints row: with many producers
-- enqueueing for the same endpoints at once, every commit rewrites that
-- row's lock (a multixact) and they queue on its page. Queue rows are only
-- ever created by joining the live endpoints (dispatcher_enqueue, the bulk
-- fan-out), endpoints are deleted softly (schema 003), and a hard DELETE
-- still takes its queue rows with it, by a trigger (endpoints_delete_queue).
ALTER TABLE webhook_queue DROP CONSTRAINT IF EXISTS webhook_queue_endpoint_id_fkey;

-- The trigger that deletes a hard-deleted endpoint's queue rows
-- (endpoints_delete_queue) and the enqueue functions that join the live
-- endpoints: schema/functions/triggers.sql and queue.sql.
