-- The per-minute figures (endpoint_minutes, schema 020): the latency
-- histogram's bucket arithmetic, the upsert that adds attempts and outcomes
-- to their minutes, the attempt log's trigger that calls it, and the
-- percentile refresh that merges them (schema 028's running window). Defined
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
    -- A minute written late, one the refresh's running window may hold
    -- already (it holds those five minutes old and older; a rewrite after
    -- a failover, a back-dated import): noted, and the window is merged
    -- anew at the next refresh. Appended, not a flag updated: no writer
    -- waits on another or on a refresh. A flush of the current minute
    -- writes nothing here.
    WITH late AS (
        INSERT INTO endpoint_window_late (minute)
        SELECT min(m) FROM unnest(p_minute) m
        HAVING min(m) < date_trunc('minute', now()) - interval '4 minutes'
    )
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

-- The latency window's rows (endpoint_id, hist_b, hist_n) from after p_cut
-- to before p_hi, read as whole hours where roll_up_hours made them: the
-- minutes of the window's first, partial hour, the hours rolled up after
-- it, then the minutes from the last of those on.
CREATE OR REPLACE FUNCTION dispatcher_window_parts(p_cut timestamptz, p_hi timestamptz)
RETURNS TABLE (endpoint_id bigint, hist_b smallint[], hist_n integer[])
LANGUAGE sql STABLE AS $$
    WITH bounds AS MATERIALIZED (
        SELECT date_trunc('hour', p_cut) + interval '1 hour' AS edge,
               coalesce((SELECT max(hour) FROM endpoint_hours) + interval '1 hour', '-infinity')
                   AS rolled
    )
    -- Index ranges at the two ends, not one filtered scan: the minutes
    -- between are most.
    SELECT m.endpoint_id, m.hist_b, m.hist_n FROM endpoint_minutes m, bounds
    WHERE m.minute > p_cut AND m.minute < least(bounds.edge, p_hi)
    UNION ALL
    SELECT m.endpoint_id, m.hist_b, m.hist_n FROM endpoint_minutes m, bounds
    WHERE m.minute >= greatest(bounds.rolled, bounds.edge) AND m.minute < p_hi
    UNION ALL
    SELECT h.endpoint_id, h.hist_b, h.hist_n FROM endpoint_hours h, bounds
    WHERE h.hour >= bounds.edge AND h.hour < least(bounds.rolled, p_hi)
$$;

-- Per endpoint, p50/p95/p99 over the latency window (p_window_s) from its
-- minutes' histograms, interpolated between order statistics as
-- percentile_cont is, and the last hour's attempts and 2xx answers. An
-- endpoint with no minute in the window is left with no percentiles and
-- no samples.
--
-- A window of two hours or more is read as schema 028's running window
-- (endpoint_window: its settled part, up to five minutes ago, merged) plus
-- the minutes since: each call moves it forward by adding the minutes
-- that settled and taking out those that left the window, a few minutes
-- an endpoint, where merging the day's hours and the window's two partial
-- hours at every call cost 105-156 ms for 50 busy endpoints. It is merged
-- from scratch on its first use, an hour on (what a clamp at zero may have
-- hidden: a minute changed after it was merged other than through
-- dispatcher_count_minutes), when the window's length changed, and after
-- dispatcher_count_minutes noted a minute written late. Minutes are kept
-- an hour past the window (prune_minutes), so the ones to take out are
-- there. As before, a minute written into an hour already rolled up counts
-- in the last-hour figures and not in that hour's row: the window may miss
-- it (and, taking that minute out later, take its samples out of others
-- of the bucket, clamped at zero) until the hour is the window's first,
-- read as minutes, at a merge from scratch.
CREATE OR REPLACE FUNCTION dispatcher_refresh_percentiles(p_window_s float8) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_cut timestamptz := now() - make_interval(secs => p_window_s);
    v_hi timestamptz := 'infinity';
    v_running boolean := p_window_s >= 7200;
    v_late boolean;
    s endpoint_window_state;
BEGIN
    -- One at a time: two moving the window at once would both take the
    -- same minutes out. (A maintenance round holds it to its commit.)
    PERFORM pg_advisory_xact_lock(hashtext('dispatcher_refresh_percentiles'), 28);
    IF v_running THEN
        -- Settled: five minutes on, as roll_up_hours waits, and never
        -- inside an hour already rolled up.
        v_hi := greatest(date_trunc('minute', now() - interval '5 minutes'),
                         (SELECT max(hour) + interval '1 hour' FROM endpoint_hours));
        SELECT * INTO s FROM endpoint_window_state;
        -- The late minutes taken first: one written after this takes the
        -- next refresh from scratch too.
        WITH seen AS (DELETE FROM endpoint_window_late RETURNING 1)
        SELECT count(*) > 0 INTO v_late FROM seen;
        IF s.one IS NULL OR v_late OR s.built_at IS NULL
           OR s.built_at < now() - interval '1 hour'
           OR s.window_s <> p_window_s OR s.lo > v_cut OR s.hi > v_hi
           OR s.lo < v_cut - interval '1 hour' THEN
            DELETE FROM endpoint_window;
            INSERT INTO endpoint_window (endpoint_id, hist_b, hist_n)
            SELECT x.endpoint_id, array_agg(x.b ORDER BY x.b), array_agg(x.n ORDER BY x.b)
            FROM (SELECT p.endpoint_id, u.b, sum(u.n)::int AS n
                  FROM dispatcher_window_parts(v_cut, v_hi) p,
                       unnest(p.hist_b, p.hist_n) AS u(b, n)
                  GROUP BY 1, 2) x
            GROUP BY x.endpoint_id;
            INSERT INTO endpoint_window_state (window_s, lo, hi, built_at)
            VALUES (p_window_s, v_cut, v_hi, now())
            ON CONFLICT (one) DO UPDATE
            SET window_s = EXCLUDED.window_s, lo = EXCLUDED.lo, hi = EXCLUDED.hi,
                built_at = EXCLUDED.built_at;
        ELSE
            WITH delta AS (
                SELECT m.endpoint_id, m.hist_b, m.hist_n, 1 AS sign FROM endpoint_minutes m
                WHERE m.minute >= s.hi AND m.minute < v_hi
                UNION ALL
                SELECT m.endpoint_id, m.hist_b, m.hist_n, -1 FROM endpoint_minutes m
                WHERE m.minute > s.lo AND m.minute <= v_cut
            ), touched AS (
                SELECT DISTINCT d.endpoint_id FROM delta d
            ), merged AS (
                -- A count below zero (a minute changed after it was added)
                -- is clamped: the hourly merge puts it right.
                SELECT x.endpoint_id, x.b, sum(x.n)::int AS n
                FROM (SELECT w.endpoint_id, u.b, u.n
                      FROM endpoint_window w JOIN touched t ON t.endpoint_id = w.endpoint_id,
                           unnest(w.hist_b, w.hist_n) AS u(b, n)
                      UNION ALL
                      SELECT d.endpoint_id, u.b, d.sign * u.n
                      FROM delta d, unnest(d.hist_b, d.hist_n) AS u(b, n)) x
                GROUP BY 1, 2
                HAVING sum(x.n) > 0
            )
            INSERT INTO endpoint_window AS w (endpoint_id, hist_b, hist_n)
            SELECT t.endpoint_id,
                   coalesce(array_agg(m.b ORDER BY m.b) FILTER (WHERE m.b IS NOT NULL), '{}'),
                   coalesce(array_agg(m.n ORDER BY m.b) FILTER (WHERE m.b IS NOT NULL), '{}')
            FROM touched t LEFT JOIN merged m ON m.endpoint_id = t.endpoint_id
            GROUP BY t.endpoint_id
            ON CONFLICT (endpoint_id) DO UPDATE SET hist_b = EXCLUDED.hist_b, hist_n = EXCLUDED.hist_n;
            UPDATE endpoint_window_state SET lo = v_cut, hi = v_hi;
        END IF;
    END IF;
    WITH win AS MATERIALIZED (
        SELECT w.endpoint_id, w.hist_b, w.hist_n FROM endpoint_window w WHERE v_running
        UNION ALL
        SELECT m.endpoint_id, m.hist_b, m.hist_n FROM endpoint_minutes m
        WHERE v_running AND m.minute >= v_hi
        UNION ALL
        SELECT p.endpoint_id, p.hist_b, p.hist_n FROM dispatcher_window_parts(v_cut, v_hi) p
        WHERE NOT v_running
    ), hist AS (
        SELECT win.endpoint_id, u.b, sum(u.n)::bigint AS n
        FROM win, unnest(win.hist_b, win.hist_n) AS u(b, n)
        GROUP BY win.endpoint_id, u.b
    ), cum AS (
        -- bigint, not the numeric a sum of bigints is: the ranks' joins
        -- compare these some ten thousand times.
        SELECT hist.endpoint_id, hist.b, hist.n,
               (sum(hist.n) OVER (PARTITION BY hist.endpoint_id ORDER BY hist.b))::bigint AS upto,
               (sum(hist.n) OVER (PARTITION BY hist.endpoint_id))::bigint AS total
        FROM hist
    ), ranks AS (
        -- The (0-based) order statistics each percentile falls between.
        SELECT t.endpoint_id, t.total, q, floor(q * (t.total - 1)) AS r_lo,
               ceil(q * (t.total - 1)) AS r_hi, q * (t.total - 1) - floor(q * (t.total - 1)) AS frac
        FROM (SELECT DISTINCT cum.endpoint_id, cum.total FROM cum) t,
             unnest('{0.5,0.95,0.99}'::float8[]) q
    ), pct AS (
        SELECT r.endpoint_id, r.total, r.q,
               (1 - r.frac) * dispatcher_latency_value(lo.b)
               + r.frac * dispatcher_latency_value(hi.b) AS v
        FROM ranks r
        JOIN cum lo ON lo.endpoint_id = r.endpoint_id AND r.r_lo >= lo.upto - lo.n
                   AND r.r_lo < lo.upto
        JOIN cum hi ON hi.endpoint_id = r.endpoint_id AND r.r_hi >= hi.upto - hi.n
                   AND r.r_hi < hi.upto
    ), per AS (
        SELECT pct.endpoint_id, max(pct.total)::int AS n,
               max(pct.v) FILTER (WHERE pct.q = 0.5) AS p50,
               max(pct.v) FILTER (WHERE pct.q = 0.95) AS p95,
               max(pct.v) FILTER (WHERE pct.q = 0.99) AS p99
        FROM pct GROUP BY pct.endpoint_id
    ), last_hour AS (
        SELECT m.endpoint_id, sum(m.attempts)::int AS hour_n, sum(m.answered_2xx)::int AS hour_ok
        FROM endpoint_minutes m WHERE m.minute > now() - interval '1 hour'
        GROUP BY m.endpoint_id
    )
    UPDATE endpoint_health h
    SET p50_ms = per.p50, p95_ms = per.p95, p99_ms = per.p99, sample_count = coalesce(per.n, 0),
        attempts_last_hour = coalesce(last_hour.hour_n, 0),
        successes_last_hour = coalesce(last_hour.hour_ok, 0)
    FROM endpoint_health h2
    LEFT JOIN per ON per.endpoint_id = h2.endpoint_id
    LEFT JOIN last_hour ON last_hour.endpoint_id = h2.endpoint_id
    WHERE h.endpoint_id = h2.endpoint_id
      AND (per.endpoint_id IS NOT NULL OR h2.sample_count <> 0 OR h2.p95_ms IS NOT NULL
           OR h2.attempts_last_hour <> 0);
END $$;
