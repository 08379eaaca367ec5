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

-- A count is the sum of its rows: each change appends one (two flushes
-- never wait on one row's lock, as they would during a storm of dead
-- letters), and maintenance folds them into one row every round
-- (dispatcher_fold_counts), so a read sums a handful.
CREATE TABLE dispatcher_counts (
    name text NOT NULL,
    n    bigint NOT NULL
);

INSERT INTO dispatcher_counts (name, n)
SELECT 'dead_letters', count(*) FROM webhook_history WHERE status = 'dead_letter';
