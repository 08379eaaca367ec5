-- migrate: with functions
-- The dead letters, counted as they come and go (issue 31): `health` and
-- `/metrics` counted history's dead leaves at every read, a scan as long
-- as 30 days of dead letters (tens of milliseconds at 100,000, growing
-- with traffic). The insert and delete triggers on webhook_history
-- (schema/functions/history.sql) add and take away what a statement
-- moved; a partition dropped or pruned past retention takes its rows
-- off (partitions.sql). With functions: the triggers name the table.
--
-- History's writers wait while the count is taken, so that none moves a
-- dead letter between the count and the triggers that count it from now
-- on (the queue's table first, the order the outcome write takes them):
-- one scan of the dead leaves, a second or so at millions.
LOCK TABLE webhook_live IN SHARE ROW EXCLUSIVE MODE;
LOCK TABLE webhook_history IN SHARE ROW EXCLUSIVE MODE;

CREATE TABLE dispatcher_counts (
    name text PRIMARY KEY,
    n    bigint NOT NULL
);

INSERT INTO dispatcher_counts (name, n)
SELECT 'dead_letters', count(*) FROM webhook_history WHERE status = 'dead_letter';
