-- Per endpoint per minute, what its attempts and outcomes were (issue 31,
-- SPEC "History, payloads and retention"): the percentiles and every
-- "last hour" figure are merged from these rows, so their cost is bounded
-- by endpoints x minutes of the window, not by how much was delivered.
-- Written by the same statement that records a flush's outcomes (one
-- upsert per endpoint and minute the flush touched), pruned by maintenance
-- once older than the latency window.
--
-- The latency histogram is sparse and log-bucketed: bucket b holds
-- responses of b ms below 100 ms, and above that [100 x 1.02^(b-100),
-- 100 x 1.02^(b-99)) ms, so a bucket's geometric middle is within 1 % of
-- any response in it (queries.sql, `refresh_percentiles`). `hist_b` sorted
-- ascending, `hist_n` the counts, index for index.
CREATE TABLE endpoint_minutes (
    endpoint_id  bigint NOT NULL REFERENCES endpoints (id) ON DELETE CASCADE,
    minute       timestamptz NOT NULL,
    attempts     integer NOT NULL DEFAULT 0,  -- attempts that reached the wire
    answered_2xx integer NOT NULL DEFAULT 0,
    delivered    integer NOT NULL DEFAULT 0,
    delivered_ms bigint NOT NULL DEFAULT 0,   -- their response times, summed
    dead         integer NOT NULL DEFAULT 0,
    hist_b       smallint[] NOT NULL DEFAULT '{}',
    hist_n       integer[] NOT NULL DEFAULT '{}',
    PRIMARY KEY (endpoint_id, minute)
);
-- The last hour's figures across endpoints (health, alerts).
CREATE INDEX endpoint_minutes_minute_idx ON endpoint_minutes (minute);
-- Updated in place at every flush of the current minute: leave room on the
-- page for HOT updates, and vacuum it as the small hot table it is.
ALTER TABLE endpoint_minutes SET (fillfactor = 70, autovacuum_vacuum_scale_factor = 0.02);

-- Whole hours of the same, rolled up by maintenance from their minutes once
-- the hour is over (queries.sql `roll_up_hours`): the percentile refresh
-- reads a window's hours from here and only the minutes at its two ends,
-- about 150 rows an endpoint for a day instead of 1,440 (1.4 s for 50 busy
-- endpoints, measured: too much every 10 s).
CREATE TABLE endpoint_hours (
    endpoint_id  bigint NOT NULL REFERENCES endpoints (id) ON DELETE CASCADE,
    hour         timestamptz NOT NULL,
    attempts     integer NOT NULL,
    answered_2xx integer NOT NULL,
    hist_b       smallint[] NOT NULL,
    hist_n       integer[] NOT NULL,
    PRIMARY KEY (endpoint_id, hour)
);
CREATE INDEX endpoint_hours_hour_idx ON endpoint_hours (hour);

-- The last 24 hours of raw samples, folded in, so that an upgraded
-- deployment's percentiles and last-hour figures carry on where they were.
-- The bucket is dispatcher_latency_bucket's arithmetic written out: the
-- functions of schema/functions/ are applied after the numbered migrations.
INSERT INTO endpoint_minutes (endpoint_id, minute, attempts, answered_2xx, hist_b, hist_n)
SELECT endpoint_id, minute, sum(n)::int, sum(ok)::int,
       array_agg(b ORDER BY b), array_agg(n::int ORDER BY b)
FROM (
    SELECT endpoint_id, date_trunc('minute', measured_at) AS minute,
           CASE WHEN response_ms < 100 THEN greatest(response_ms, 0)
                ELSE 100 + floor(ln(response_ms / 100.0) / ln(1.02))::int END::smallint AS b,
           count(*) AS n,
           count(*) FILTER (WHERE status_code BETWEEN 200 AND 299) AS ok
    FROM endpoint_latency
    WHERE measured_at > now() - interval '24 hours'
    GROUP BY 1, 2, 3
) s
GROUP BY endpoint_id, minute;

-- And the last two hours' outcomes (health's and alerts' last-hour figures).
INSERT INTO endpoint_minutes AS m (endpoint_id, minute, delivered, delivered_ms, dead)
SELECT endpoint_id, date_trunc('minute', coalesce(delivered_at, updated_at)),
       (count(*) FILTER (WHERE status = 'delivered'))::int,
       coalesce(sum(last_response_ms) FILTER (WHERE status = 'delivered'), 0),
       (count(*) FILTER (WHERE status = 'dead_letter'))::int
FROM webhook_queue
WHERE (status = 'delivered' AND delivered_at > now() - interval '2 hours')
   OR (status = 'dead_letter' AND updated_at > now() - interval '2 hours')
GROUP BY 1, 2
ON CONFLICT (endpoint_id, minute) DO UPDATE
SET delivered = EXCLUDED.delivered, delivered_ms = EXCLUDED.delivered_ms, dead = EXCLUDED.dead;

-- Retention of every table that grows (settings.Retention): maintenance
-- deletes what is past it in bounded batches by time; these tables had no
-- index by time alone. BRIN: rows arrive in time order, and the index is a
-- few pages whatever the table's size.
CREATE INDEX messages_created_brin ON messages USING brin (created_at);
CREATE INDEX breaker_transitions_at_brin ON breaker_transitions USING brin (at);
