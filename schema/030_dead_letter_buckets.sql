-- migrate: with functions
-- The dead letters counted per endpoint, five minutes, last status code
-- and last error (issue 31): `dlq analyze` read every dead letter of its
-- span (a week of 1 % dead at 10,000 a minute: 143,000 a day, 150-300 ms
-- and growing with traffic), where SPEC asks for a report bounded by what
-- it returns. Now it reads at most 288 counts a day an endpoint (and each
-- code and error), the dead letters of the span's first five minutes one
-- by one, so the span's edge stays exact, and each endpoint's first and
-- last letter from the dead letters' (endpoint_id, updated_at) indexes.
--
-- The history triggers (schema/functions/history.sql) append what each
-- statement moved to dead_letter_deltas (two flushes never wait on one
-- row's lock); a partition dropped or pruned takes its rows off
-- (partitions.sql); maintenance folds the deltas into dead_letter_buckets
-- (dispatcher_fold_counts, one worker at a time, so no upsert races).
-- With functions: the triggers name the tables.
--
-- History's writers wait while the existing ones are counted, as in 029
-- (the queue's table first, the order the outcome write takes them).
LOCK TABLE webhook_live IN SHARE ROW EXCLUSIVE MODE;
LOCK TABLE webhook_history IN SHARE ROW EXCLUSIVE MODE;

CREATE TABLE dead_letter_buckets (
    endpoint_id      bigint NOT NULL,
    bucket           timestamptz NOT NULL,  -- dispatcher_dead_bucket(updated_at)
    last_status_code integer,
    last_error       text,
    n                bigint NOT NULL,
    attempts         bigint NOT NULL        -- their attempt_count, summed
);
-- Reads go by time; the fold finds a bucket by time and endpoint.
CREATE INDEX dead_letter_buckets_bucket_idx ON dead_letter_buckets (bucket, endpoint_id);
-- Emptied by replays, drops and prunes: removed by the fold.
CREATE INDEX dead_letter_buckets_empty_idx ON dead_letter_buckets (bucket) WHERE n <= 0;

CREATE TABLE dead_letter_deltas (LIKE dead_letter_buckets);

INSERT INTO dead_letter_buckets
SELECT endpoint_id, date_bin('5 minutes', updated_at, timestamptz '2000-01-01 00:00+00'),
       last_status_code, last_error, count(*), sum(attempt_count)
FROM webhook_history WHERE status = 'dead_letter'
GROUP BY 1, 2, 3, 4;
