-- Deliver in the shape each receiver expects: the request's method and body
-- (affiliate postbacks are GETs with URL macros), what counts as success in
-- a 2xx body, which events an endpoint wants (a filter decided at enqueue),
-- FIFO per key, and per-endpoint TLS client credentials.
--
-- Every new endpoints column has a constant default or none: no table
-- rewrite. webhook_queue gains one nullable column (no rewrite either) and
-- one partial index over live FIFO rows only, which starts out empty.
ALTER TABLE endpoints
    ADD COLUMN method text NOT NULL DEFAULT 'POST' CHECK (method IN ('POST', 'GET', 'PUT')),
    -- NULL: the method's default (json for POST and PUT, none for GET).
    ADD COLUMN body text CHECK (body IS NULL OR body IN ('json', 'form', 'none')),
    ADD COLUMN success_body text CHECK (success_body IS NULL OR length(success_body) <= 1000),
    ADD COLUMN filter jsonb CHECK (filter IS NULL OR jsonb_typeof(filter) = 'object'),
    ADD COLUMN ordering text NOT NULL DEFAULT 'none' CHECK (ordering IN ('none', 'fifo')),
    ADD COLUMN ordering_key text
        CHECK (ordering_key IS NULL OR ordering_key ~ '^[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*$'),
    -- PEM, sealed like secrets when DISPATCHER_SECRET_KEY is set.
    ADD COLUMN client_cert text,
    ADD COLUMN client_key text;

-- A FIFO endpoint's lane: the ordering key's value (or '' without a key),
-- fixed at enqueue; NULL for unordered endpoints.
ALTER TABLE webhook_queue ADD COLUMN order_key text;

-- The claim asks, for a FIFO row, whether an earlier live row of the same
-- lane exists: one index probe, over live FIFO rows only.
CREATE INDEX webhook_queue_lane_idx ON webhook_queue (endpoint_id, order_key, id)
    WHERE order_key IS NOT NULL AND status IN ('pending', 'failed', 'in_flight');

-- What the fan-out reads of a payload for the filter and the lane
-- (dispatcher_filter_passes, dispatcher_order_key): schema/functions/shaping.sql;
-- the enqueue functions that call them: schema/functions/queue.sql.
