-- The per-minute figures (endpoint_minutes, schema 020): the latency
-- histogram's bucket arithmetic, the upsert that adds attempts and outcomes
-- to their minutes, and the attempt log's trigger that calls it. Defined
-- once and edited in place: `dispatcher migrate` re-applies this file when
-- its text changes (CONTRIBUTING.md, "Changing the schema").

-- The latency histogram's buckets (endpoint_minutes, schema 020): bucket b
-- holds responses of b ms below 100 ms and, from there, [100 x 1.02^(b-100),
-- 100 x 1.02^(b-99)) ms; a bucket stands for its geometric middle, within
-- 1 % of any response in it. Both directions here, so that the outcome
-- writes and the percentile refresh cannot disagree.
CREATE OR REPLACE FUNCTION dispatcher_latency_bucket(ms integer) RETURNS smallint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT (CASE WHEN ms < 100 THEN greatest(ms, 0)
                 ELSE 100 + floor(ln(ms / 100.0) / ln(1.02))::int END)::smallint
$$;

CREATE OR REPLACE FUNCTION dispatcher_latency_value(b smallint) RETURNS double precision
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN b < 100 THEN b::float8 ELSE 100 * power(1.02, b - 100 + 0.5) END
$$;

-- Adds attempts and outcomes to their endpoint's minutes: what the outcome
-- writes (queries.sql `record_outcomes`, `rewrite_outcomes`) call with the
-- rows they changed, one element per row. One upsert per endpoint and
-- minute, taken in (endpoint, minute) order, so that two workers' flushes
-- wait for each other rather than deadlock.
CREATE OR REPLACE FUNCTION dispatcher_count_minutes(
    p_endpoint bigint[], p_minute timestamptz[], p_status text[], p_spent boolean[],
    p_code integer[], p_ms integer[]
) RETURNS void
LANGUAGE sql AS $$
    INSERT INTO endpoint_minutes AS m (endpoint_id, minute, attempts, answered_2xx, delivered,
                                       delivered_ms, dead, hist_b, hist_n)
    SELECT endpoint_id, minute, sum(n)::int, sum(ok)::int, sum(delivered)::int,
           sum(delivered_ms), sum(dead)::int,
           coalesce(array_agg(b ORDER BY b) FILTER (WHERE n > 0), '{}'),
           coalesce(array_agg(n::int ORDER BY b) FILTER (WHERE n > 0), '{}')
    FROM (
        SELECT endpoint_id, date_trunc('minute', minute) AS minute,
               CASE WHEN spent THEN dispatcher_latency_bucket(ms) END AS b,
               count(*) FILTER (WHERE spent) AS n,
               count(*) FILTER (WHERE spent AND code BETWEEN 200 AND 299) AS ok,
               count(*) FILTER (WHERE status = 'delivered') AS delivered,
               coalesce(sum(ms) FILTER (WHERE status = 'delivered'), 0) AS delivered_ms,
               count(*) FILTER (WHERE status = 'dead_letter') AS dead
        FROM unnest(p_endpoint, p_minute, p_status, p_spent, p_code, p_ms)
            AS u(endpoint_id, minute, status, spent, code, ms)
        GROUP BY 1, 2, 3
    ) per_bucket
    GROUP BY endpoint_id, minute
    ORDER BY endpoint_id, minute
    ON CONFLICT (endpoint_id, minute) DO UPDATE
    SET attempts = m.attempts + EXCLUDED.attempts,
        answered_2xx = m.answered_2xx + EXCLUDED.answered_2xx,
        delivered = m.delivered + EXCLUDED.delivered,
        delivered_ms = m.delivered_ms + EXCLUDED.delivered_ms,
        dead = m.dead + EXCLUDED.dead,
        (hist_b, hist_n) = (
            SELECT coalesce(array_agg(b ORDER BY b), '{}'), coalesce(array_agg(n ORDER BY b), '{}')
            FROM (SELECT b, sum(n)::int AS n
                  FROM unnest(m.hist_b || EXCLUDED.hist_b, m.hist_n || EXCLUDED.hist_n) AS u(b, n)
                  GROUP BY b) merged)
$$;

-- Every attempt that reaches the attempt log is counted in its minute,
-- whoever writes it: the outcome writes, the rewrite after a failover, an
-- import by hand. One call per statement, over the rows it inserted.
CREATE OR REPLACE FUNCTION dispatcher_count_attempts() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM dispatcher_count_minutes(array_agg(endpoint_id), array_agg(measured_at),
                                     array_agg(NULL::text), array_agg(true),
                                     array_agg(status_code), array_agg(response_ms))
    FROM new_attempts
    HAVING count(*) > 0;
    RETURN NULL;
END $$;

CREATE OR REPLACE TRIGGER endpoint_latency_minutes AFTER INSERT ON endpoint_latency
    REFERENCING NEW TABLE AS new_attempts
    FOR EACH STATEMENT EXECUTE FUNCTION dispatcher_count_attempts();
