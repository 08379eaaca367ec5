-- The days of the time-partitioned tables: the attempt log
-- (endpoint_latency by measured_at, schema 023) and the payload store
-- (event_payloads by created_at, schema 025). Defined once and edited in
-- place: `dispatcher migrate` re-applies this file when its text changes
-- (CONTRIBUTING.md, "Changing the schema").

-- Makes p_parent's partitions of today and the p_ahead days after it that
-- are missing (named PARENT_pYYYYMMDD, UTC days of its partition key), and drops
-- every partition whose whole range is older than p_keep_s (NULL: keeps
-- them all). A day whose rows went to the default partition meanwhile
-- takes them along. DDL waits at most a second for its lock and is
-- otherwise left to the next round, so a long reader never makes the
-- writes queue behind it. Returns the partitions made and dropped.
--
-- A payload day is dropped only after the deliveries still to be sent
-- that reference it (held for months, or scheduled far ahead) have taken
-- their payload inline, in the drop's transaction: retention never takes
-- what a live row still needs. Delivered and dead rows of the day then
-- show payload_expired.
CREATE OR REPLACE FUNCTION dispatcher_day_partitions(
    p_parent text, p_ahead integer, p_keep_s float8
) RETURNS TABLE (created integer, dropped integer)
LANGUAGE plpgsql AS $$
DECLARE
    today timestamptz := date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC';
    -- The table's own partition key, so no caller can name another column.
    p_column text := (SELECT a.attname FROM pg_partitioned_table pt
                      JOIN pg_attribute a ON a.attrelid = pt.partrelid
                                         AND a.attnum = pt.partattrs[0]
                      WHERE pt.partrelid = p_parent::regclass);
    lo timestamptz;
    hi timestamptz;
    part text;
    r record;
BEGIN
    created := 0;
    dropped := 0;
    PERFORM set_config('lock_timeout', '1000', true);
    FOR i IN 0 .. p_ahead LOOP
        lo := today + make_interval(days => i);
        hi := lo + interval '1 day';
        part := p_parent || '_p' || to_char(lo AT TIME ZONE 'UTC', 'YYYYMMDD');
        CONTINUE WHEN to_regclass(part) IS NOT NULL;
        BEGIN
            EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS)', part, p_parent);
            EXECUTE format('WITH moved AS (DELETE FROM %I WHERE %I >= $1 AND %I < $2'
                           ' RETURNING *) INSERT INTO %I SELECT * FROM moved',
                           p_parent || '_default', p_column, p_column, part) USING lo, hi;
            EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
                           p_parent, part, lo, hi);
            created := created + 1;
        EXCEPTION
            -- The day is inside a legacy partition's range (the attempt
            -- log's upgrade day), or a lock was not had in time: nothing
            -- made this round. (Or another session made it first: a
            -- `migrate` beside the maintaining worker; at the same
            -- instant, a catalog key clash.)
            WHEN invalid_object_definition OR lock_not_available OR duplicate_table
                 OR unique_violation THEN NULL;
        END;
    END LOOP;
    IF p_keep_s IS NULL THEN
        RETURN NEXT;
        RETURN;
    END IF;
    FOR r IN
        SELECT c.relname,
               substring(pg_get_expr(c.relpartbound, c.oid) FROM $re$TO \('([^']+)'\)$re$)
                   ::timestamptz AS upper_bound
        FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = p_parent::regclass
    LOOP
        CONTINUE WHEN r.upper_bound IS NULL  -- the default partition
                   OR r.upper_bound > now() - make_interval(secs => p_keep_s);
        BEGIN
            IF p_parent = 'event_payloads' THEN
                EXECUTE format(
                    'UPDATE webhook_live w SET payload = p.body, payload_id = NULL,'
                    ' payload_at = NULL FROM %I p'
                    ' WHERE w.payload_at < $1'
                    '   AND w.status IN (''held'', ''pending'', ''failed'', ''in_flight'')'
                    '   AND p.id = w.payload_id AND p.created_at = w.payload_at',
                    r.relname) USING r.upper_bound;
            END IF;
            EXECUTE format('DROP TABLE %I', r.relname);
            dropped := dropped + 1;
        EXCEPTION WHEN lock_not_available OR undefined_table THEN NULL;
        END;
    END LOOP;
    RETURN NEXT;
END $$;
