-- The triggers, and the functions they run: the rows that follow from an
-- endpoint's creation and deletion, and the notifications that make every
-- worker re-read its endpoints, settings or membership at once. After the
-- other files (name order): a trigger needs its table and its function.
--
-- Triggers and functions here are defined once and edited in place:
-- `dispatcher migrate` re-applies this file when its text changes
-- (CONTRIBUTING.md, "Changing the schema"). CREATE OR REPLACE TRIGGER takes
-- the same SHARE ROW EXCLUSIVE lock on its table as CREATE TRIGGER: writes
-- to these small tables wait for the re-apply's transaction.

-- Every endpoint has its endpoint_health row (breaker state, percentiles)
-- from the start, with the endpoint's breaker settings: the worker's
-- breaker and percentile writes update it, never insert it.
CREATE OR REPLACE FUNCTION dispatcher_endpoint_health_row() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO endpoint_health (endpoint_id, failure_threshold, cooldown_seconds)
    VALUES (NEW.id, NEW.failure_threshold, NEW.cooldown_s)
    ON CONFLICT (endpoint_id) DO NOTHING;
    RETURN NEW;
END $$;

CREATE OR REPLACE TRIGGER endpoints_health_row AFTER INSERT ON endpoints
    FOR EACH ROW EXECUTE FUNCTION dispatcher_endpoint_health_row();

-- A hard DELETE of an endpoint takes its queue rows with it. webhook_live
-- has no foreign key to endpoints (schema 006): the check would take FOR
-- KEY SHARE on the endpoint row at every producer's insert, and many
-- producers enqueueing for the same endpoints then queue on that row's
-- lock. Queue rows are only ever created by joining the live endpoints,
-- and endpoints are deleted softly (schema 003).
CREATE OR REPLACE FUNCTION dispatcher_endpoint_gone() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM webhook_live WHERE endpoint_id = OLD.id;
    DELETE FROM webhook_history WHERE endpoint_id = OLD.id;
    RETURN OLD;
END $$;

CREATE OR REPLACE TRIGGER endpoints_delete_queue AFTER DELETE ON endpoints
    FOR EACH ROW EXECUTE FUNCTION dispatcher_endpoint_gone();

-- Workers refresh their endpoints when one changes (a rotated secret signs
-- the next request, not the one after the next refresh). Per row, so a
-- statement that changes nothing (maintenance's prune of expired secrets)
-- wakes no one; the delivery path never writes these tables, and one
-- transaction's notifications fold into one.
CREATE OR REPLACE FUNCTION dispatcher_endpoints_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('dispatcher_endpoints', '');
    RETURN NULL;
END $$;
CREATE OR REPLACE TRIGGER endpoints_changed AFTER INSERT OR UPDATE OR DELETE ON endpoints
    FOR EACH ROW EXECUTE FUNCTION dispatcher_endpoints_changed();
CREATE OR REPLACE TRIGGER endpoint_secrets_changed
    AFTER INSERT OR UPDATE OR DELETE ON endpoint_secrets
    FOR EACH ROW EXECUTE FUNCTION dispatcher_endpoints_changed();
-- The wake-up switch (schema 016): workers re-read it at once, on the same
-- channel.
CREATE OR REPLACE TRIGGER settings_changed
    AFTER INSERT OR UPDATE OR DELETE ON dispatcher_settings
    FOR EACH ROW EXECUTE FUNCTION dispatcher_endpoints_changed();

-- Limits hold across processes from the first request (SPEC "Several
-- processes…"): each worker takes its share of an endpoint's rate and
-- max_in_flight from the live workers it counts, and keeps to the shares
-- of the membership it has published (applied_members, schema 017). A
-- worker that registers or leaves, or publishes a new membership, tells
-- the others at once, on the channel that wakes their endpoint refresh, so
-- they rebalance in milliseconds rather than at their next refresh (up to
-- a second, during which an endpoint could get up to twice its rate).
-- Heartbeats are updates that change no membership and notify no one.
CREATE OR REPLACE FUNCTION dispatcher_workers_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('dispatcher_endpoints', '');
    RETURN NULL;
END $$;
CREATE OR REPLACE TRIGGER workers_joined AFTER INSERT OR DELETE ON dispatcher_workers
    FOR EACH ROW EXECUTE FUNCTION dispatcher_workers_changed();
CREATE OR REPLACE TRIGGER workers_applied AFTER UPDATE OF applied_members ON dispatcher_workers
    FOR EACH ROW WHEN (OLD.applied_members IS DISTINCT FROM NEW.applied_members)
    EXECUTE FUNCTION dispatcher_workers_changed();
