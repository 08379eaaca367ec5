-- What each worker reports with its heartbeat, so `dispatcher health` can
-- tell a worker that is busy from one that lost its database: a worker that
-- cannot reach the database stops beating, and its claimed rows sit
-- in_flight until it is back (or their lease runs out).
ALTER TABLE dispatcher_workers
    ADD COLUMN in_flight integer NOT NULL DEFAULT 0,
    ADD COLUMN outcomes_waiting integer NOT NULL DEFAULT 0;
