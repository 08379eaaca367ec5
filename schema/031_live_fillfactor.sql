-- migrate: with functions
-- Half of each page of the live queue left free at insert (issue 31:
-- WAL per delivery). A claim rewrites its row (status and next_attempt_at
-- are indexed: never a HOT update). When the new version lands on the old
-- one's page, PostgreSQL logs only the bytes between the first and the
-- last changed column, so the payload (before status) and the columns
-- after locked_by stay out of the record, and no row lock is logged
-- first; on another page the whole tuple is logged, plus a lock. Rows
-- claimed soon after their insert find room on their page anyway; a
-- backlog claimed after a burst or an outage did not: its pages were full.
-- Measured (fast drain of 30,000 after their enqueue, PostgreSQL 15,
-- pg_walinspect): the claim's Heap/UPDATE 516 bytes a delivery and
-- Heap/LOCK 110 at fillfactor 100; in SQL, 100 rows a claim, 927 bytes a
-- claimed row against 518 at 50. 50, not more: a claim takes every row of
-- a page at once, so each needs room for its new version.
--
-- The price is pages: a backlog takes twice the pages. The live queue
-- holds only rows not yet final. SET (fillfactor) takes SHARE UPDATE
-- EXCLUSIVE: producers and workers go on; pages already written keep
-- their rows.
--
-- With functions, and the two tables locked first in the outcome write's
-- order, as 027-030: a migration without functions is followed by a pass
-- over every repeatable file in a transaction of its own, whose triggers
-- lock history before the queue's table, and that deadlocked with a
-- worker's outcome write in the upgrade-under-traffic test.
LOCK TABLE webhook_live IN SHARE ROW EXCLUSIVE MODE;
LOCK TABLE webhook_history IN SHARE ROW EXCLUSIVE MODE;
ALTER TABLE webhook_live SET (fillfactor = 50);
