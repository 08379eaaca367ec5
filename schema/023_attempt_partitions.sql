-- The attempt log by day (issue 31, SPEC "History, payloads and
-- retention"): `endpoint_latency` becomes a table partitioned by
-- measured_at, one partition per UTC day, so its retention drops whole
-- days instead of deleting rows one batch at a time (at the seed design's
-- 10,000 a minute that is 14.4 million rows a day). The name and the
-- columns stay: every reader and writer is unchanged.
--
-- What the table held becomes one partition, `endpoint_latency_legacy`,
-- covering everything before tomorrow (UTC): attaching it reads it once
-- to check the bound (a few seconds at ten million rows), nothing is
-- copied. It is dropped whole once its last day is past the retention.
-- An empty one (a fresh database) is dropped at once.
--
-- The days ahead are made by dispatcher_attempt_partitions
-- (schema/functions/latency.sql), at `migrate` and by the maintenance
-- round; a default partition takes what falls outside them (a clock far
-- off, rows written by hand) and is pruned by bounded deletes.
DO $$
DECLARE
    tomorrow timestamptz :=
        (date_trunc('day', now() AT TIME ZONE 'UTC') + interval '1 day') AT TIME ZONE 'UTC';
BEGIN
    ALTER TABLE endpoint_latency RENAME TO endpoint_latency_legacy;
    ALTER INDEX endpoint_latency_endpoint_time_idx RENAME TO endpoint_latency_legacy_endpoint_time_idx;
    ALTER INDEX endpoint_latency_time_idx RENAME TO endpoint_latency_legacy_time_idx;
    ALTER INDEX endpoint_latency_delivery_idx RENAME TO endpoint_latency_legacy_delivery_idx;
    -- The per-minute counter fires on the parent (a statement trigger with a
    -- transition table cannot be a partition's); latency.sql makes it there.
    DROP TRIGGER IF EXISTS endpoint_latency_minutes ON endpoint_latency_legacy;

    CREATE TABLE endpoint_latency (
        endpoint_id bigint NOT NULL
            CONSTRAINT endpoint_latency_endpoint_fkey REFERENCES endpoints (id) ON DELETE CASCADE,
        response_ms integer NOT NULL,
        status_code integer,
        measured_at timestamptz NOT NULL DEFAULT now(),
        delivery_id bigint,
        error       text
    ) PARTITION BY RANGE (measured_at);
    CREATE INDEX endpoint_latency_endpoint_time_idx ON endpoint_latency (endpoint_id, measured_at);
    CREATE INDEX endpoint_latency_time_idx ON endpoint_latency USING brin (measured_at);
    CREATE INDEX endpoint_latency_delivery_idx ON endpoint_latency USING brin (delivery_id);

    IF EXISTS (SELECT 1 FROM endpoint_latency_legacy) THEN
        EXECUTE format('ALTER TABLE endpoint_latency ATTACH PARTITION endpoint_latency_legacy'
                       ' FOR VALUES FROM (MINVALUE) TO (%L)', tomorrow);
    ELSE
        DROP TABLE endpoint_latency_legacy;
    END IF;
    CREATE TABLE endpoint_latency_default PARTITION OF endpoint_latency DEFAULT;
END $$;
