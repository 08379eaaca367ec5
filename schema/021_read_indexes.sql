-- Reads bounded by what they return (issue 31): the dead letters newest
-- first across endpoints (the console's list, `dispatcher dlq list`, and
-- its pages) walked an ordered index instead of sorting every dead letter
-- (0.36 s with 100,000 of them), and the timeline's enqueued count per
-- bucket read a BRIN range of created_at instead of the whole queue
-- (0.41 s at 10 million rows; its dead letters read the index above, its
-- deliveries the BRIN of schema 001). Both are built by one scan of
-- the queue at the upgrade (a few seconds at 10 million rows, writers
-- wait): the BRIN one is a few pages whatever the queue's size.
CREATE INDEX webhook_queue_dead_newest_idx ON webhook_queue (updated_at DESC, id DESC)
    WHERE status = 'dead_letter';
CREATE INDEX webhook_queue_created_brin ON webhook_queue USING brin (created_at);
