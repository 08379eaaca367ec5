-- Postback tooling (SPEC "Postback tooling (affiliate networks)"): macro
-- styles and value maps per endpoint, held and cancelled deliveries, and
-- disabling an endpoint after N consecutive failures within S seconds.
--
-- What this costs on a live system: endpoints gets columns with constant
-- defaults (no rewrite); webhook_queue's status CHECK is replaced by a
-- looser one added NOT VALID, so nothing scans the queue under the lock
-- (every existing row passed the old, stricter check); the index on held
-- rows starts empty because no row is held yet.

ALTER TABLE endpoints
    ADD COLUMN macro_style text NOT NULL DEFAULT 'brace'
        CHECK (macro_style IN ('brace', 'hash', 'double')),
    -- {"status": {"approved": "1", "*": "0"}}: a macro's value → the partner's code.
    ADD COLUMN value_map jsonb,
    ADD COLUMN disable_after integer
        CONSTRAINT endpoints_disable_after_range CHECK (disable_after BETWEEN 1 AND 1000),
    ADD COLUMN disable_within_s double precision
        CONSTRAINT endpoints_disable_within_s_range
        CHECK (disable_within_s BETWEEN 1 AND 2592000),
    ADD CONSTRAINT endpoints_disable_pair
        CHECK ((disable_after IS NULL) = (disable_within_s IS NULL));

-- The times (epoch seconds) of the current run of consecutive failed
-- attempts, newest last, at most disable_after of them: kept only for
-- endpoints with disable_after, written with the breaker (same lock).
ALTER TABLE endpoint_health
    ADD COLUMN failure_times double precision[] NOT NULL DEFAULT '{}';

-- held: enqueued with hold, not sent until released. cancelled: ended by
-- `event cancel`, never sent. Neither is in webhook_queue_due_idx (its
-- predicate is pending/failed/in_flight), so the claim never sees them.
ALTER TABLE webhook_queue DROP CONSTRAINT webhook_queue_status_check;
ALTER TABLE webhook_queue ADD CONSTRAINT webhook_queue_status_check
    CHECK (status IN ('pending', 'in_flight', 'delivered', 'failed', 'dead_letter',
                      'held', 'cancelled')) NOT VALID;
-- Counts and lists of held rows (health, the dashboard) without a scan of
-- the queue; release and cancel find an event's rows by the unique
-- (event_id, endpoint_id) index.
CREATE INDEX webhook_queue_held_idx ON webhook_queue (endpoint_id, created_at)
    WHERE status = 'held';

-- Enqueueing with `hold`, and a producer's release and cancel of an event
-- (dispatcher_release_event, dispatcher_cancel_event): schema/functions/queue.sql.
