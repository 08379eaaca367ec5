-- Portal access bounded by the credential that made it (issue 32, SPEC
-- "Limits"): a code minted with an application token records that token,
-- expires no later than it, and signs in only while it is live; a session
-- opened with such a code carries the token too and ends when the token is
-- revoked or expires. NULL: minted by the operator (admin token, CLI),
-- bounded by its own expiry only. ON DELETE CASCADE: deleting a token (as
-- deleting an application does) ends what it made.
--
-- What this costs on a live system: two nullable columns (catalog only, no
-- rewrite) on the two small portal tables, whose foreign keys are
-- validated by one scan of each (they hold a day of codes and sessions at
-- most: prune_portal); partial indexes so that deleting a token finds
-- what it made without a scan. webhook_queue is not touched.
ALTER TABLE portal_codes
    ADD COLUMN token_id bigint REFERENCES application_tokens (id) ON DELETE CASCADE;
ALTER TABLE portal_sessions
    ADD COLUMN token_id bigint REFERENCES application_tokens (id) ON DELETE CASCADE;
CREATE INDEX portal_codes_token_idx ON portal_codes (token_id) WHERE token_id IS NOT NULL;
CREATE INDEX portal_sessions_token_idx ON portal_sessions (token_id) WHERE token_id IS NOT NULL;

-- An application's cancel of an event leaves the operator's operational
-- webhooks alone (dispatcher_cancel_event's p_operator_ops):
-- schema/functions/queue.sql.
