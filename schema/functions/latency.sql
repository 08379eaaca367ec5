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

-- The attempt log's days (schema 023): makes the partitions of today and
-- the p_ahead days after it that are missing, and drops every partition
-- whose whole range is older than p_keep_s (NULL: keeps them all). A day
-- whose rows went to the default partition meanwhile takes them along.
-- DDL waits at most a second for its lock and is otherwise left to the
-- next round, so a long reader never makes the outcome writes queue
-- behind it. Returns the partitions made and dropped.
CREATE OR REPLACE FUNCTION dispatcher_attempt_partitions(
    p_ahead integer, p_keep_s float8
) RETURNS TABLE (created integer, dropped integer)
LANGUAGE plpgsql AS $$
DECLARE
    today timestamptz := date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC';
    lo timestamptz;
    hi timestamptz;
    part text;
    r record;
BEGIN
    created := 0;
    dropped := 0;
    PERFORM set_config('lock_timeout', '1000', true);
    FOR i IN 0 .. p_ahead LOOP
        lo := today + make_interval(days => i);
        hi := lo + interval '1 day';
        part := 'endpoint_latency_p' || to_char(lo AT TIME ZONE 'UTC', 'YYYYMMDD');
        CONTINUE WHEN to_regclass(part) IS NOT NULL;
        BEGIN
            EXECUTE format('CREATE TABLE %I (LIKE endpoint_latency INCLUDING DEFAULTS)', part);
            EXECUTE format('WITH moved AS (DELETE FROM endpoint_latency_default'
                           ' WHERE measured_at >= $1 AND measured_at < $2 RETURNING *)'
                           ' INSERT INTO %I SELECT * FROM moved', part) USING lo, hi;
            EXECUTE format('ALTER TABLE endpoint_latency ATTACH PARTITION %I'
                           ' FOR VALUES FROM (%L) TO (%L)', part, lo, hi);
            created := created + 1;
        EXCEPTION
            -- The day is inside the legacy partition's range (the upgrade's
            -- day), or a lock was not had in time: nothing made this round.
            -- (Or another session made it first: a `migrate` beside the
            -- maintaining worker; at the same instant, a catalog key clash.)
            WHEN invalid_object_definition OR lock_not_available OR duplicate_table
                 OR unique_violation THEN NULL;
        END;
    END LOOP;
    IF p_keep_s IS NULL THEN
        RETURN NEXT;
        RETURN;
    END IF;
    FOR r IN
        SELECT c.relname,
               substring(pg_get_expr(c.relpartbound, c.oid) FROM $re$TO \('([^']+)'\)$re$)
                   ::timestamptz AS upper_bound
        FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'endpoint_latency'::regclass
    LOOP
        CONTINUE WHEN r.upper_bound IS NULL  -- the default partition
                   OR r.upper_bound > now() - make_interval(secs => p_keep_s);
        BEGIN
            EXECUTE format('DROP TABLE %I', r.relname);
            dropped := dropped + 1;
        EXCEPTION WHEN lock_not_available OR undefined_table THEN NULL;
        END;
    END LOOP;
    RETURN NEXT;
END $$;
