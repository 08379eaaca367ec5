-- Traces and attempt details (SPEC "Traces and attempt details"): the W3C
-- trace context a producer enqueued with (each attempt then carries a
-- traceparent of that trace and a span of its own), and one JSON record per
-- attempt in the attempt log (core/attemptdetail.py: timings, the
-- receiver's address, its response headers and the start of its body, a
-- postback's URL as fired). Nullable columns: the catalogue alone changes,
-- on the queue and on every day of the attempt log.
ALTER TABLE webhook_queue ADD COLUMN traceparent text, ADD COLUMN tracestate text;
ALTER TABLE endpoint_latency ADD COLUMN detail jsonb;
