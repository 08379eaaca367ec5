-- migrate: with functions
-- A payload stored once per event (issue 31, SPEC "History, payloads and
-- retention"): an event fanned out to ten endpoints kept ten copies of its
-- body, and one sent through the Svix API an eleventh in `messages`.
--
-- The queue's table becomes `webhook_live`; `webhook_queue` is a view over
-- it (schema/functions/deliveries.sql) with the contract's columns, whose
-- `payload` is the row's own or the one it references in `event_payloads`.
-- Readers are unchanged; writers name the table. The rename and the view
-- go in one transaction with the functions (the marker above): at no
-- instant is there no `webhook_queue`, nor an enqueue function writing
-- to the view.
--
-- Who stores where: an event with one delivery keeps its payload inline,
-- as before (one copy, no extra row or lookup on the hottest path); an
-- event with more, and every Svix message, stores it once in
-- event_payloads, and its rows and message reference it by (payload_id,
-- payload_at). Rows written before this keep theirs inline.
--
-- event_payloads is partitioned by UTC day like the attempt log (schema
-- 023), so payload retention drops whole days: dispatcher_day_partitions
-- (schema/functions/partitions.sql) makes them ahead and drops them, after
-- copying into its row the payload of a delivery still waiting to be sent.
-- A delivered or dead row whose day went shows `payload_expired`.
CREATE SEQUENCE event_payloads_id_seq;
CREATE TABLE event_payloads (
    id         bigint NOT NULL DEFAULT nextval('event_payloads_id_seq'),
    created_at timestamptz NOT NULL DEFAULT now(),
    body       json NOT NULL,
    PRIMARY KEY (id, created_at)
) PARTITION BY RANGE (created_at);
ALTER SEQUENCE event_payloads_id_seq OWNED BY event_payloads.id;
-- What falls outside the days made ahead (a clock far off) lands here and
-- moves into its day when that day is made.
CREATE TABLE event_payloads_default PARTITION OF event_payloads DEFAULT;

ALTER TABLE webhook_queue RENAME TO webhook_live;
ALTER TABLE webhook_live ADD COLUMN payload_id bigint, ADD COLUMN payload_at timestamptz;
-- The rows a payload day's drop must rescue first: those still to be sent
-- that reference the store. Only fan-out rows enter it, and only while live.
CREATE INDEX webhook_live_payload_ref_idx ON webhook_live (payload_at)
    WHERE payload_at IS NOT NULL AND status IN ('held', 'pending', 'failed', 'in_flight');

ALTER TABLE messages ADD COLUMN payload_id bigint, ADD COLUMN payload_at timestamptz;

-- Replaced by dispatcher_day_partitions, which makes the days of every
-- partitioned history table.
DROP FUNCTION IF EXISTS dispatcher_attempt_partitions(integer, float8);
