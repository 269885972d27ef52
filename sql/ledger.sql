-- The ledger's one writer for SQL callers (Rust appends through pg_retention/src/catalog/ledger.rs,
-- the same columns). With policy_id, an entry about that policy carrying its current name,
-- version and table, written only while the policy is live; without, an entry naming
-- policy_name (NULL: no policy), for the worker's own events.
CREATE FUNCTION retention._ledger_append(method text, actor text, detail jsonb, policy_id bigint,
                                         policy_name text DEFAULT NULL) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
    IF method IS NULL OR actor IS NULL THEN
        RAISE EXCEPTION 'a ledger entry needs a method and an actor' USING ERRCODE = '22004';
    END IF;
    IF policy_id IS NULL THEN
        INSERT INTO retention.ledger_entries (method, policy, rows, actor, detail)
        VALUES (method, policy_name, 0, actor, coalesce(detail, '{}'));
    ELSE
        INSERT INTO retention.ledger_entries (method, policy, policy_id, policy_version, relation, rows, actor, detail)
        SELECT method, p.name, p.id, p.version, p.relation::text, 0, actor, coalesce(detail, '{}')
          FROM retention.policies p WHERE p.id = _ledger_append.policy_id;
    END IF;
END
$fn$;


-- The ledger's running totals (retention.policy_counters, catalog.sql): the entries about a
-- policy are counted by the trigger below in the statement that appends them, so
-- retention.stats and retention.metrics() read one row per policy whatever the ledger's size.
-- One upsert per policy and statement (a row-level trigger updating the same counter row once
-- per entry of a long transaction walks an ever longer chain of its versions). An upgrade
-- counts the entries written before the counters existed with the same function.

-- The reason a failure is counted under (a closed set): privilege, conflict (serialization,
-- deadlock, lock or statement timeout), invalid (data or definition errors), archive_refused,
-- archive_failed, lease_expired, other; NULL for an entry that is no failure.
CREATE FUNCTION retention._error_reason(method text, detail jsonb) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $fn$
    SELECT CASE
        WHEN method = 'error' THEN CASE
            WHEN detail->>'sqlstate' = '42501' THEN 'privilege'
            WHEN detail->>'sqlstate' IN ('40001', '40P01', '55P03', '57014') THEN 'conflict'
            WHEN left(detail->>'sqlstate', 2) IN ('22', '23', '42') THEN 'invalid'
            ELSE 'other' END
        WHEN method = 'release' AND detail->>'cause' = 'refused' THEN 'archive_refused'
        WHEN method = 'release' AND detail->>'cause' = 'failed' THEN 'archive_failed'
        -- Releases ledgered without a cause (archivers before 0.5.0) say it in their reason.
        WHEN method = 'release' AND NOT detail ? 'cause' AND detail->>'reason' LIKE 'refused%' THEN 'archive_refused'
        WHEN method = 'release' AND NOT detail ? 'cause' AND detail->>'reason' LIKE 'archiver%' THEN 'archive_failed'
        WHEN method = 'lease_expired' THEN 'lease_expired'
    END
$fn$;

-- Whether an entry moves a counter below: one that counts nothing (a claim) must not lock the
-- policy's counter row, or the claims and prunes of one policy queue on it. (SQL without SET,
-- so it is inlined into its callers, which pin the search_path.)
CREATE FUNCTION retention._counts(method text, archive_id bigint) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $fn$
    SELECT archive_id IS NOT NULL
        OR method IN ('prune', 'orphan_sweep', 'drop_partition', 'hold_skip', 'reference_skip', 'cap_reached',
                      'skip_locked', 'pause', 'run', 'error', 'release', 'lease_expired')
$fn$;

-- Adds `entries` to the counters of their policies. PL/pgSQL, not SQL: a SQL function's
-- statement is planned again at every call (about 2 ms here, once per sweep step), PL/pgSQL
-- keeps its plan for the session.
CREATE FUNCTION retention._count_ledger(entries retention.ledger_entries[]) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
    WITH e AS (
        SELECT e.*, retention._error_reason(e.method, e.detail) AS reason,
               a.rows AS archived_rows, a.bytes AS archived_bytes
          FROM unnest(entries) e
          LEFT JOIN retention.archive_records a ON a.id = e.archive_id
         WHERE e.policy_id IS NOT NULL AND retention._counts(e.method, e.archive_id)),
    errors AS (
        SELECT policy_id, jsonb_object_agg(reason, n) AS errors
          FROM (SELECT policy_id, reason, count(*) AS n FROM e WHERE reason IS NOT NULL GROUP BY 1, 2) r
         GROUP BY 1)
    INSERT INTO retention.policy_counters AS c (
        policy_id, rows_deleted, batches, rows_archived, bytes_archived, archives, hold_skips,
        reference_skips, cap_hits, partitions_dropped, skipped_locked, pauses, paused_seconds, errors,
        last_run_at, last_outcome, last_success_at, last_archive_at, last_error_at, last_error, backlog)
    SELECT e.policy_id,
           coalesce(sum(e.rows) FILTER (WHERE e.method IN ('prune', 'orphan_sweep', 'drop_partition')), 0),
           count(*) FILTER (WHERE e.method IN ('prune', 'orphan_sweep')),
           coalesce(sum(e.archived_rows), 0),
           coalesce(sum(e.archived_bytes), 0),
           count(e.archived_rows),
           coalesce(sum(e.rows) FILTER (WHERE e.method = 'hold_skip'), 0),
           coalesce(sum(e.rows) FILTER (WHERE e.method = 'reference_skip'), 0),
           count(*) FILTER (WHERE e.method = 'cap_reached'),
           count(*) FILTER (WHERE e.method = 'drop_partition'),
           count(*) FILTER (WHERE e.method = 'skip_locked'),
           coalesce(sum(coalesce((e.detail->>'pauses')::bigint, 1)) FILTER (WHERE e.method = 'pause'), 0),
           coalesce(sum((e.detail->>'seconds')::float8) FILTER (WHERE e.method = 'pause'), 0),
           coalesce(min(x.errors::text)::jsonb, '{}'),
           max(e.at) FILTER (WHERE e.method = 'run'),
           (array_agg(e.detail->>'outcome' ORDER BY e.id DESC) FILTER (WHERE e.method = 'run'))[1],
           max(e.at) FILTER (WHERE e.method = 'run' AND e.detail->>'outcome' = 'ok'),
           max(e.at) FILTER (WHERE e.archived_rows IS NOT NULL),
           max(e.at) FILTER (WHERE e.method = 'error'),
           (array_agg(e.detail->>'error' ORDER BY e.id DESC) FILTER (WHERE e.method = 'error'))[1],
           (array_agg((e.detail->>'backlog')::bigint ORDER BY e.id DESC) FILTER (WHERE e.method = 'run'))[1]
      FROM e LEFT JOIN errors x ON x.policy_id = e.policy_id
     GROUP BY e.policy_id
    ON CONFLICT (policy_id) DO UPDATE SET
        rows_deleted = c.rows_deleted + EXCLUDED.rows_deleted,
        batches = c.batches + EXCLUDED.batches,
        rows_archived = c.rows_archived + EXCLUDED.rows_archived,
        bytes_archived = c.bytes_archived + EXCLUDED.bytes_archived,
        archives = c.archives + EXCLUDED.archives,
        hold_skips = c.hold_skips + EXCLUDED.hold_skips,
        reference_skips = c.reference_skips + EXCLUDED.reference_skips,
        cap_hits = c.cap_hits + EXCLUDED.cap_hits,
        partitions_dropped = c.partitions_dropped + EXCLUDED.partitions_dropped,
        skipped_locked = c.skipped_locked + EXCLUDED.skipped_locked,
        pauses = c.pauses + EXCLUDED.pauses,
        paused_seconds = c.paused_seconds + EXCLUDED.paused_seconds,
        errors = (SELECT coalesce(jsonb_object_agg(k, n), '{}')
                    FROM (SELECT k, sum(v::bigint) AS n
                            FROM (SELECT * FROM jsonb_each_text(c.errors)
                                  UNION ALL SELECT * FROM jsonb_each_text(EXCLUDED.errors)) t(k, v)
                           GROUP BY k) m),
        last_run_at = greatest(c.last_run_at, EXCLUDED.last_run_at),
        last_success_at = greatest(c.last_success_at, EXCLUDED.last_success_at),
        last_archive_at = greatest(c.last_archive_at, EXCLUDED.last_archive_at),
        last_error_at = greatest(c.last_error_at, EXCLUDED.last_error_at),
        last_error = CASE WHEN EXCLUDED.last_error_at IS NOT NULL THEN EXCLUDED.last_error ELSE c.last_error END,
        last_outcome = CASE WHEN EXCLUDED.last_run_at IS NOT NULL THEN EXCLUDED.last_outcome ELSE c.last_outcome END,
        backlog = CASE WHEN EXCLUDED.last_run_at IS NOT NULL THEN EXCLUDED.backlog ELSE c.backlog END;
END
$fn$;

-- The trigger on retention.ledger_entries that keeps the counters, once per statement over the
-- rows it appended (CREATE OR REPLACE: this file is run again by every upgrade; the function
-- is never dropped, the trigger needs it).
CREATE FUNCTION retention._count_ledger_entries() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
    one retention.ledger_entries;
BEGIN
    -- A sweep step appends one prune entry of its own (no archive): it moves two counters of a
    -- row that exists once its policy has run, which one UPDATE does (~0.05 ms) where the
    -- general statement takes ~0.35 ms, at every step. Its effect is the same.
    IF (SELECT count(*) FROM new_entries) = 1 THEN
        SELECT * INTO one FROM new_entries;
        IF one.method = 'prune' AND one.archive_id IS NULL AND one.policy_id IS NOT NULL THEN
            UPDATE retention.policy_counters
               SET rows_deleted = rows_deleted + one.rows, batches = batches + 1
             WHERE policy_id = one.policy_id;
            IF FOUND THEN
                RETURN NULL;
            END IF;
        END IF;
    END IF;
    -- A statement that appended nothing counted (a claim's entry) skips the counting statement
    -- (about 0.4 ms a call here, most of it planning).
    IF EXISTS (SELECT 1 FROM new_entries n WHERE retention._counts(n.method, n.archive_id)) THEN
        PERFORM retention._count_ledger(ARRAY(SELECT ROW(n.*)::retention.ledger_entries FROM new_entries n));
    END IF;
    RETURN NULL;
END
$fn$;
CREATE OR REPLACE TRIGGER count_entries AFTER INSERT ON retention.ledger_entries
    REFERENCING NEW TABLE AS new_entries
    FOR EACH STATEMENT EXECUTE FUNCTION retention._count_ledger_entries();
