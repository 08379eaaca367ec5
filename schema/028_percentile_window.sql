-- migrate: with functions
-- The percentile refresh's running window (issue 31): per endpoint, the
-- latency histogram of the window's settled part, merged once and then
-- moved forward by the minutes that came into it and the minutes that fell
-- out of it, so that a refresh merges a few minutes an endpoint instead of
-- a day of hours and the window's two partial hours (105-156 ms for 50
-- busy endpoints at every fresh read of endpoint health, alerts and slow:
-- over the 100 ms every operator read must answer in). Kept by
-- dispatcher_refresh_percentiles (schema/functions/latency.sql); a cache
-- that can be dropped whole at any time: the next refresh rebuilds it.
-- With functions: dispatcher_count_minutes names endpoint_window_late.
--
-- No foreign key to endpoints: a refresh's write would check one per row
-- and meet an endpoint's hard delete (its cascades take the rows the
-- other way round). A deleted endpoint's row is left to the next merge
-- from scratch, and read by nothing meanwhile.
CREATE TABLE endpoint_window (
    endpoint_id bigint PRIMARY KEY,
    hist_b      smallint[] NOT NULL,
    hist_n      integer[] NOT NULL
);

-- What endpoint_window holds: the minutes after `lo` and before `hi` of a
-- window `window_s` long, merged from scratch at `built_at` (again an
-- hour on, or when a minute it may cover was written late). One row.
CREATE TABLE endpoint_window_state (
    one      boolean PRIMARY KEY DEFAULT true CHECK (one),
    window_s double precision NOT NULL,
    lo       timestamptz NOT NULL,
    hi       timestamptz NOT NULL,
    built_at timestamptz
);

-- Minutes written late (a rewrite after a failover, a back-dated import):
-- appended by dispatcher_count_minutes, never updated, so that no writer
-- waits on a refresh or on another writer; the next refresh merges the
-- window from scratch and removes those it saw.
CREATE TABLE endpoint_window_late (
    minute timestamptz NOT NULL
);
