-- One test shot at a time per application (issue 32, SPEC "Limits"). A
-- shot (`POST /v1/endpoints/{id}/send-test`, `endpoint test`) goes out with
-- no database connection held, so the rule cannot be a lock a session
-- keeps: it is a lease on the application's row, taken by one UPDATE that
-- succeeds only when no live lease is there, in whichever process or host
-- the shot is made, and cleared when the shot is back. A process that dies
-- with a shot out leaves a lease that ends by itself (the shot's timeout
-- cap plus a margin). NULL: no shot out.
ALTER TABLE applications ADD COLUMN test_shot_until timestamptz;
