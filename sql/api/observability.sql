-- pg_retention SQL surface: observability (docs/observability.md). health(), keep_up() and
-- metrics().

-- One row per live policy: healthy, and why not.
CREATE FUNCTION retention.health()
RETURNS TABLE (policy text, healthy boolean, reasons text[], notes text[],
               total_rows bigint, eligible_rows bigint, blocked_rows bigint)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
    p record;
    r text[];
    -- Without shared_preload_libraries no worker runs; the settings are read with missing_ok
    -- (their defaults otherwise) so a managed host gets a report, not an error.
    preloaded boolean := retention._preloaded();
    enabled boolean := coalesce(nullif(current_setting('pg_retention.enabled', true), ''), 'on')::boolean;
    served boolean := retention._served();
    naptime interval := coalesce(nullif(current_setting('pg_retention.naptime', true), ''), '1h')::interval;
    launcher boolean := EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.backend_type = 'pg_retention launcher');
    -- Served is when the last visit ended, or one is under way; waiting past two naptimes
    -- means the pool (pg_retention.max_workers) cannot keep up.
    unserved interval := (SELECT clock_timestamp() - w.last_visit_end FROM retention.workers w
                           WHERE w.database = current_database() AND NOT w.running);
    last_run record;
    overdue text;
    skips bigint;
    run_detail jsonb;
    counted record;
BEGIN
    FOR p IN SELECT * FROM retention.policies ORDER BY name LOOP
        r := '{}';
        -- The doctor's counts, by the sweep's own eligibility (api/preview.rs).
        SELECT * INTO counted FROM retention._doctor(p.id);
        IF NOT p.enabled THEN
            r := array_append(r, 'policy disabled');
        END IF;
        IF p.max_table_rows IS NOT NULL AND counted.total_rows > p.max_table_rows THEN
            r := array_append(r, format('%s rows in %s, over its budget of max_table_rows = %s (%s eligible, %s of them blocked)',
                                        counted.total_rows, p.relation, p.max_table_rows,
                                        counted.eligible_rows, counted.blocked_rows));
        END IF;
        IF p.action = 'delete' AND p.enabled THEN
            IF NOT preloaded THEN
                r := array_append(r, 'worker not preloaded (pg_retention is not in shared_preload_libraries): schedule CALL retention.run(), e.g. with pg_cron');
            ELSIF NOT enabled THEN
                r := array_append(r, 'worker disabled (pg_retention.enabled = off)');
            ELSIF NOT served THEN
                r := array_append(r, format('database %s is not in pg_retention.databases', current_database()));
            ELSIF NOT launcher THEN
                r := array_append(r, 'the pg_retention launcher is not running');
            ELSIF unserved > 2 * naptime THEN
                r := array_append(r, format('database not served for %s, more than two naptimes (waiting for one of pg_retention.max_workers = %s workers)',
                                            date_trunc('second', unserved), current_setting('pg_retention.max_workers', true)));
            END IF;
            -- From the running totals: one row, whatever the ledger's size.
            SELECT c.last_run_at AS at, c.last_outcome AS outcome INTO last_run
              FROM retention.policy_counters c WHERE c.policy_id = p.id;
            IF last_run.at IS NULL THEN
                IF (SELECT created_at FROM retention.policy_ids i WHERE i.id = p.id) < now() - 2 * naptime THEN
                    r := array_append(r, 'never ran in two naptimes');
                END IF;
            ELSIF last_run.outcome = 'error' THEN
                r := array_append(r, ('last run failed: ' || coalesce((SELECT s.last_error FROM retention.stats s WHERE s.policy = p.name), 'error')));
            ELSIF last_run.outcome = 'cap' THEN
                r := array_append(r, 'run cap hit in the last run');
            ELSE
                -- A backlog that foreign keys keep whole (engine/references.rs).
                run_detail := (SELECT l.detail FROM retention.ledger_entries l
                                WHERE l.policy_id = p.id AND l.method = 'run' ORDER BY l.id DESC LIMIT 1);
                IF (run_detail->>'deleted')::bigint = 0 AND coalesce((run_detail->>'referenced')::bigint, 0) > 0 THEN
                    r := array_append(r, format('its last run deleted nothing: all %s eligible rows are kept by rows that reference them through foreign keys (NO ACTION or RESTRICT, or a cascade that would reach a held row)',
                                                run_detail->>'referenced'));
                END IF;
            END IF;
            IF EXISTS (SELECT 1 FROM retention.worker_state w
                        WHERE w.database = current_database() AND w.state = 'paused' AND w.current_policy = p.name
                          AND w.paused_since < now() - 2 * naptime) THEN
                r := array_append(r, (SELECT format('sweep paused for %s (%s), longer than the grace of two naptimes',
                                                    date_trunc('second', clock_timestamp() - w.paused_since), w.pause_reason)
                                        FROM retention.worker_state w WHERE w.database = current_database()));
            END IF;
            skips := (SELECT count(*) FROM retention.ledger_entries l WHERE l.policy_id = p.id
                        AND l.method = 'skip_locked' AND l.at > coalesce(last_run.at, '-infinity'));
            IF skips >= 3 THEN
                r := array_append(r, format('skipped %s times in a row since its last run: another session holds its lock (a pg_locks advisory lock on key %s)',
                                            skips, retention._lock_key(p.id)));
            END IF;
            IF EXISTS (SELECT 1 FROM retention.ledger_entries l WHERE l.policy_id = p.id AND l.method = 'cycle_cap'
                        AND l.at > coalesce(last_run.at, '-infinity')) THEN
                r := array_append(r, 'cycle cap hit before the policy ran');
            END IF;
        END IF;
        overdue := retention._overdue(p.id, (2 * naptime)::text);
        IF overdue IS NOT NULL THEN
            r := array_append(r, overdue);
        END IF;
        policy := p.name;
        healthy := cardinality(r) = 0;
        reasons := r;
        total_rows := counted.total_rows;
        eligible_rows := counted.eligible_rows;
        blocked_rows := counted.blocked_rows;
        -- Facts that qualify what the policy governs, not faults.
        notes := CASE WHEN p.visible_rows_only THEN
            ARRAY[format('governs only the rows row-level security on %s shows its owner %s (visible_rows_only); preview counts the others as hidden_rows',
                         p.relation, p.owner)] ELSE '{}' END;
        RETURN NEXT;
    END LOOP;
END
$fn$;

-- Whether retention keeps up, per live policy, over the last `over` (from the ledger: what left,
-- and the backlog its runs recorded): rows that left, rows that became deletable (those that
-- left plus the backlog's growth), both per hour, and at this pace how long the backlog takes to
-- drain (NULL: it does not drain at this pace). A delete policy's backlog is what its last run
-- left (its cap); `backlog_before` is what the last run before the window left (or, without
-- one, what the window's first run found). An archive policy's backlog is the kept gauge (now),
-- with no history: its growth is not known and `falling_behind` is NULL.
CREATE FUNCTION retention.keep_up(over interval DEFAULT '1 day')
RETURNS TABLE (policy text, rows_left bigint, rows_became_eligible bigint, backlog bigint,
               backlog_before bigint, left_per_hour double precision,
               eligible_per_hour double precision, drain_estimate interval, falling_behind boolean)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
    SELECT retention._require_positive('over', over::text, 'Keep-up is measured over a past window.',
                                       'Pass over => ''1 day'' or so.');
    WITH w AS (
        SELECT now() - over AS since, extract(epoch FROM over)::double precision / 3600 AS hours
    ), p AS (
        SELECT i.id, i.name, v.action FROM retention.policy_ids i
         CROSS JOIN LATERAL (SELECT pv.action FROM retention.policy_versions pv
                              WHERE pv.policy_id = i.id ORDER BY pv.version DESC LIMIT 1) v
         WHERE i.dropped_at IS NULL
    ), m AS (
        SELECT p.name, w.hours,
               (SELECT coalesce(sum(l.rows), 0) FROM retention.ledger_entries l
                 WHERE l.policy_id = p.id AND l.at > w.since
                   AND l.method IN ('prune', 'orphan_sweep', 'drop_partition', 'erasure'))::bigint AS rows_left,
               CASE WHEN p.action IN ('archive_then_delete', 'archive')
                    THEN (SELECT g.eligible_rows FROM retention.policy_gauges g WHERE g.policy_id = p.id)
                    ELSE (SELECT c.backlog FROM retention.policy_counters c WHERE c.policy_id = p.id)
               END AS backlog,
               -- A delete policy's backlog a window ago: its last run's before then, or what
               -- the first run since found (the backlog it left and what it deleted).
               CASE WHEN p.action NOT IN ('archive_then_delete', 'archive') THEN coalesce(
                    (SELECT (l.detail->>'backlog')::bigint FROM retention.ledger_entries l
                      WHERE l.policy_id = p.id AND l.method = 'run' AND l.at <= w.since
                      ORDER BY l.id DESC LIMIT 1),
                    (SELECT (l.detail->>'backlog')::bigint + (l.detail->>'deleted')::bigint
                       FROM retention.ledger_entries l
                      WHERE l.policy_id = p.id AND l.method = 'run' AND l.at > w.since
                      ORDER BY l.id LIMIT 1))
               END AS backlog_before
          FROM p, w
    ), r AS (
        SELECT m.*, m.rows_left + m.backlog - m.backlog_before AS became,
               m.rows_left / m.hours AS left_rate,
               (m.rows_left + m.backlog - m.backlog_before) / m.hours AS eligible_rate
          FROM m
    )
    SELECT r.name, r.rows_left, r.became, r.backlog, r.backlog_before, r.left_rate, r.eligible_rate,
           CASE WHEN r.backlog = 0 THEN interval '0'
                WHEN r.left_rate > r.eligible_rate
                    THEN make_interval(secs => r.backlog / (r.left_rate - r.eligible_rate) * 3600)
           END,
           r.backlog > 0 AND r.backlog > r.backlog_before
      FROM r ORDER BY r.name;
$fn$;

-- Every metric of the database, one row per sample: name, labels, value, help, type. Every
-- family is named and described in api/metrics.rs; the archiver's /metrics (also in its
-- metrics-only mode) and the exporter queries in deploy/ read this. Declared here, not by
-- pgrx: it returns its rows in one call (materialize mode), kept in memory up to work_mem (about
-- 5 MB at 1,000 policies).
CREATE FUNCTION retention.metrics()
RETURNS TABLE (name text, labels jsonb, value float8, help text, type text)
LANGUAGE c SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET work_mem = '32MB'
AS 'MODULE_PATHNAME', 'retention_metrics';
