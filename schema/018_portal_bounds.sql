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

-- The operator's operational webhooks live in application default but are
-- no tenant's (issue 32): their deliveries name every application's
-- endpoints. An application's cancel of an event leaves them alone
-- (p_operator_ops false, as the service passes for every caller scoped to
-- an application); the operator, and producers' SQL, keep cancelling
-- everything of the event as before (the default). Release needs no such
-- flag: ops deliveries are never held.
DROP FUNCTION dispatcher_cancel_event(text, text);
CREATE FUNCTION dispatcher_cancel_event(
    p_app text, p_event_id text, p_operator_ops boolean DEFAULT true
) RETURNS bigint[]
LANGUAGE sql AS $$
    WITH changed AS (
        UPDATE webhook_queue q
        SET status = 'cancelled', last_error = 'cancelled', locked_by = NULL,
            updated_at = now()
        FROM endpoints e
        WHERE q.event_id = p_event_id AND q.status IN ('held', 'pending', 'failed')
          AND e.id = q.endpoint_id AND e.application_id = p_app
          AND (p_operator_ops OR e.ops_scope IS DISTINCT FROM 'operator')
        RETURNING q.id
    )
    SELECT coalesce(array_agg(id ORDER BY id), '{}') FROM changed;
$$;
