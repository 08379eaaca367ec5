-- Limits hold across processes from the first request (SPEC "Several
-- processes…"): each worker takes its share of an endpoint's rate and
-- max_in_flight from the live workers it counts at its refresh. A worker
-- that joined was counted by the others only at their next refresh, up to
-- a second later, and two started together each counted only itself: the
-- endpoint got up to twice its rate meanwhile. A worker that registers or
-- leaves now tells the others at once, on the channel that wakes their
-- endpoint refresh (schema 012), so they rebalance in milliseconds.
-- Heartbeats are updates and notify no one.
CREATE FUNCTION dispatcher_workers_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('dispatcher_endpoints', '');
    RETURN NULL;
END $$;
CREATE TRIGGER workers_joined AFTER INSERT OR DELETE ON dispatcher_workers
    FOR EACH ROW EXECUTE FUNCTION dispatcher_workers_changed();
