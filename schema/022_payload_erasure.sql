-- Erasure and payload retention (SPEC "History, payloads and retention"):
-- an event's payload can be removed at once (a GDPR request, a secret sent
-- by mistake) or when DISPATCHER_RETENTION_PAYLOAD_S has passed, while the
-- delivery rows and their attempts stay for the record. An erased payload
-- is NULL, with the time it went; such a delivery is never sent, resent or
-- replayed again. Both statements change only the catalogue: no rewrite,
-- no scan, whatever the queue's size.
ALTER TABLE webhook_queue ALTER COLUMN payload DROP NOT NULL;
ALTER TABLE webhook_queue ADD COLUMN payload_erased_at timestamptz;
ALTER TABLE messages ALTER COLUMN payload DROP NOT NULL;
ALTER TABLE messages ADD COLUMN payload_erased_at timestamptz;
