-- The time-partitioned tables: the attempt log (endpoint_latency by
-- measured_at, schema 023), the payload store (event_payloads by
-- created_at, schema 025) and the history of final deliveries (each
-- status of webhook_history by finished_at, schema 026). Defined once and
-- edited in place: `dispatcher migrate` re-applies this file when its
-- text changes (CONTRIBUTING.md, "Changing the schema").

-- p_parent's own partition key, so no caller can name another column.
CREATE OR REPLACE FUNCTION dispatcher_partition_key(p_parent text) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT a.attname::text FROM pg_partitioned_table pt
    JOIN pg_attribute a ON a.attrelid = pt.partrelid AND a.attnum = pt.partattrs[0]
    WHERE pt.partrelid = p_parent::regclass
$$;

-- p_parent's partitions and their ranges, read from the catalog: the
-- default partition's bounds are NULL, and so is a MINVALUE lower bound
-- (the attempt log's legacy partition, schema 023).
CREATE OR REPLACE FUNCTION dispatcher_partitions(p_parent text)
RETURNS TABLE (relname text, is_default boolean, lower_bound timestamptz,
               upper_bound timestamptz)
LANGUAGE sql STABLE AS $$
    SELECT c.relname::text, pg_get_expr(c.relpartbound, c.oid) = 'DEFAULT',
           substring(pg_get_expr(c.relpartbound, c.oid) FROM $re$FROM \('([^']+)'\)$re$)
               ::timestamptz,
           substring(pg_get_expr(c.relpartbound, c.oid) FROM $re$TO \('([^']+)'\)$re$)
               ::timestamptz
    FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
    WHERE i.inhparent = p_parent::regclass
$$;

-- Makes p_parent's partitions from the one holding p_from (NULL: now) to
-- p_ahead partitions past the one holding now that are missing, each
-- p_width_s wide (a day unless a short retention asks for less: see
-- core.retention.partition_width_s), aligned on UTC midnight and named
-- PARENT_pYYYYMMDD (a day) or PARENT_pYYYYMMDDHH24MI; and drops every
-- partition whose whole range is older than p_keep_s (NULL: keeps them
-- all). A partition whose rows went to the default partition meanwhile
-- takes them along. One that would overlap a partition made with another
-- width is not made: the older one covers that time. DDL waits at most a
-- second for its lock (a drop 100 ms) and is otherwise left to the next
-- round, so a long reader never makes the writes queue behind it. Returns
-- the partitions made and dropped (at most one: see below).
--
-- A payload day is dropped only after the deliveries still to be sent
-- that reference it (held for months, or scheduled far ahead) have taken
-- their payload inline, in the drop's transaction: retention never takes
-- what a live row still needs. Delivered and dead rows of the day then
-- show payload_expired.
CREATE OR REPLACE FUNCTION dispatcher_day_partitions(
    p_parent text, p_ahead integer, p_keep_s float8, p_width_s integer DEFAULT 86400,
    p_from timestamptz DEFAULT NULL
) RETURNS TABLE (created integer, dropped integer)
LANGUAGE plpgsql AS $$
DECLARE
    width interval := make_interval(secs => p_width_s);
    origin timestamptz := '2000-01-01 00:00:00+00';
    first_lo timestamptz := date_bin(width, least(coalesce(p_from, now()), now()), origin);
    last_lo timestamptz := date_bin(width, now(), origin) + width * p_ahead;
    p_column text := dispatcher_partition_key(p_parent);
    lo timestamptz;
    hi timestamptz;
    part text;
    gone bigint;
    r record;
BEGIN
    created := 0;
    dropped := 0;
    PERFORM set_config('lock_timeout', '1000', true);
    -- Bounded whatever p_from says: a backfill's rows older than this go
    -- to the default partition.
    first_lo := greatest(first_lo, last_lo - width * 400);
    lo := first_lo;
    WHILE lo <= last_lo LOOP
        hi := lo + width;
        part := p_parent || '_p' || to_char(lo AT TIME ZONE 'UTC',
                                            CASE WHEN p_width_s >= 86400 THEN 'YYYYMMDD'
                                                 ELSE 'YYYYMMDDHH24MI' END);
        lo := hi;
        CONTINUE WHEN to_regclass(part) IS NOT NULL
                   OR (p_keep_s IS NOT NULL AND hi <= now() - make_interval(secs => p_keep_s));
        BEGIN
            EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS)', part, p_parent);
            -- No row may reach the default partition between the move of
            -- its rows of this range and the attach (which checks it):
            -- its lock taken first, as the attach will want it, so that no
            -- weaker one is upgraded under a reader's (a deadlock).
            -- Writers and readers of that partition wait milliseconds.
            EXECUTE format('LOCK TABLE %I IN ACCESS EXCLUSIVE MODE', p_parent || '_default');
            EXECUTE format('WITH moved AS (DELETE FROM %I WHERE %I >= $1 AND %I < $2'
                           ' RETURNING *) INSERT INTO %I SELECT * FROM moved',
                           p_parent || '_default', p_column, p_column, part) USING hi - width, hi;
            EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
                           p_parent, part, hi - width, hi);
            created := created + 1;
        EXCEPTION
            -- The range overlaps a partition of another width or a legacy
            -- one (the attempt log's upgrade day), or a lock was not had
            -- in time: nothing made this round. (Or another session made
            -- it first: a `migrate` beside the maintaining worker; at the
            -- same instant, a catalog key clash.)
            WHEN invalid_object_definition OR lock_not_available OR duplicate_table
                 OR unique_violation OR deadlock_detected THEN NULL;
        END;
    END LOOP;
    IF p_keep_s IS NULL THEN
        RETURN NEXT;
        RETURN;
    END IF;
    -- The oldest partition past retention, one a call (the caller calls
    -- again while one went): a DROP holds the parent's ACCESS EXCLUSIVE
    -- lock to its commit, and every write and read of the table queues
    -- behind it, so it is held for the drop alone. The partition's lock
    -- is taken first: a DROP takes the parent's before the partition's,
    -- and would hold it while it waited for an autovacuum of the old
    -- partition (a second, until the autovacuum is cancelled; the soak's
    -- 900 ms outcome stall). Each lock waits at most 100 ms, else the
    -- drop is left to the next round.
    FOR r IN SELECT * FROM dispatcher_partitions(p_parent)
             WHERE upper_bound <= now() - make_interval(secs => p_keep_s)
             ORDER BY upper_bound LOOP
        BEGIN
            PERFORM set_config('lock_timeout', '100', true);
            EXECUTE format('LOCK TABLE %I IN ACCESS EXCLUSIVE MODE', r.relname);
            IF p_parent = 'event_payloads' THEN
                EXECUTE format(
                    'UPDATE webhook_live w SET payload = p.body, payload_id = NULL,'
                    ' payload_at = NULL FROM %I p'
                    ' WHERE w.payload_at < $1'
                    '   AND w.status IN (''held'', ''pending'', ''failed'', ''in_flight'')'
                    '   AND p.id = w.payload_id AND p.created_at = w.payload_at',
                    r.relname) USING r.upper_bound;
            END IF;
            IF p_parent = 'webhook_history_dead' THEN
                -- No trigger sees a DROP: its dead letters leave the count
                -- and their buckets (schema 030) here, under the
                -- partition's lock alone (no row comes or goes meanwhile),
                -- before the parent's is taken.
                EXECUTE dispatcher_dead_deltas_insert(quote_ident(r.relname), -1) INTO gone;
                PERFORM dispatcher_count_dead(gone);
            END IF;
            EXECUTE format('LOCK TABLE %I IN ACCESS EXCLUSIVE MODE', p_parent);
            EXECUTE format('DROP TABLE %I', r.relname);
            dropped := 1;
        EXCEPTION WHEN lock_not_available OR undefined_table OR deadlock_detected THEN NULL;
        END;
        EXIT;
    END LOOP;
    RETURN NEXT;
END $$;

-- The rows past p_keep_s that no partition drop takes: those of p_parent's
-- default partition, and of partitions wider than p_width_s (made before
-- a shorter retention asked for narrower ones: they would keep rows up to
-- a day past it). At most p_batch a partition a call, each a range of
-- the partition's own rows (a ctid names a row within one partition
-- only). A partition of the right width is left to its drop.
CREATE OR REPLACE FUNCTION dispatcher_prune_partition_rows(
    p_parent text, p_keep_s float8, p_width_s integer, p_batch integer
) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    p_column text := dispatcher_partition_key(p_parent);
    cutoff timestamptz := now() - make_interval(secs => p_keep_s);
    total bigint := 0;
    n bigint;
    prune text;
    r record;
BEGIN
    FOR r IN SELECT * FROM dispatcher_partitions(p_parent) LOOP
        CONTINUE WHEN NOT r.is_default
                  AND (r.lower_bound IS NULL OR r.lower_bound >= cutoff
                       OR r.upper_bound - r.lower_bound <= make_interval(secs => p_width_s));
        prune := format('DELETE FROM %I WHERE ctid = ANY (ARRAY('
                        'SELECT ctid FROM %I WHERE %I < $1 LIMIT $2))',
                        r.relname, r.relname, p_column);
        IF p_parent = 'webhook_history_dead' THEN
            -- A statement on a partition fires none of its parent's
            -- triggers: the count and the buckets (schema 030) here.
            EXECUTE dispatcher_dead_deltas_insert('gone', -1, 'gone AS (' || prune
                || ' RETURNING status, endpoint_id, updated_at, last_status_code, last_error,'
                || ' attempt_count),') INTO n USING cutoff, p_batch;
            PERFORM dispatcher_count_dead(n);
            n := -n;
        ELSE
            EXECUTE prune USING cutoff, p_batch;
            GET DIAGNOSTICS n = ROW_COUNT;
        END IF;
        total := total + n;
    END LOOP;
    RETURN total;
END $$;
