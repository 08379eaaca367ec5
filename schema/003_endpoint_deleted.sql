-- Deleting an endpoint is a soft delete: the row stays so its dead letters,
-- latency samples and breaker history keep their endpoint, but a deleted
-- endpoint is not listed, gets no new deliveries and the worker forgets it.
ALTER TABLE endpoints ADD COLUMN deleted_at timestamptz;

-- The enqueue functions skip deleted endpoints: schema/functions/queue.sql.
