-- Operational webhooks (SPEC "Operational webhooks"): the operator, and each
-- application for its own endpoints, is told what happens to endpoints as
-- signed webhooks through the same pipeline.
--
-- An ops webhook is an endpoints row of kind 'ops', so that the worker's
-- gates, breaker, signing, retries and latency samples apply to it
-- unchanged; everything that lists, counts or fans out to endpoints asks
-- for kind 'webhook'. ops_scope says whose it is: 'operator' (it lives in
-- application default and hears about every application's endpoints) or
-- 'app' (it hears about its own application's only).
--
-- What this costs on a live system: two columns with constant defaults
-- (catalog only, no rewrite of endpoints) and their checks, validated by
-- one scan of endpoints under its ACCESS EXCLUSIVE lock (milliseconds for
-- thousands of endpoints); webhook_queue is not touched.
ALTER TABLE endpoints
    ADD COLUMN kind text NOT NULL DEFAULT 'webhook' CHECK (kind IN ('webhook', 'ops')),
    ADD COLUMN ops_scope text CHECK (ops_scope IN ('operator', 'app')),
    ADD CONSTRAINT endpoints_ops_scope CHECK ((kind = 'ops') = (ops_scope IS NOT NULL));

-- The emission's only read of endpoints by kind: a few rows at most.
CREATE INDEX endpoints_ops_idx ON endpoints (application_id)
    WHERE kind = 'ops' AND deleted_at IS NULL;

-- The emission of operational events (dispatcher_ops_emit):
-- schema/functions/ops_webhooks.sql. The enqueue functions target
-- endpoints of kind 'webhook' only: schema/functions/queue.sql.
