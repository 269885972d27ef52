-- pg_retention public SQL surface. Thin wrappers over the Rust internals (the `_` functions),
-- plus the parts that are plain SQL: raising typed errors, run ordering, the run procedure,
-- the replay boundary. Runs last in the extension script (finalize).
--
-- Wrappers of entry points that act for their caller (policies, holds, consumers, erasure,
-- the archive claims and leases) are SECURITY INVOKER, and so are their Rust internals, which
-- note the role in force as the caller before taking the owner's privileges
-- (src/identity.rs): a SECURITY DEFINER wrapper would make every caller the owner.
--
-- Errors are raised by the Rust internals themselves, with their own SQLSTATEs (src/error.rs).
-- A wrapper that is one SELECT of its internal, with no SET clause, is inlined by the planner,
-- so an error it raises carries no frame of the wrapper; its internal is schema-qualified and
-- pins its own search_path. The archive protocol's wrappers keep their SET clauses (they pin
-- the settings rows render under), and so their frame.

-- Why a predicate is unacceptable for a table (NULL when it is fine). Parse and analysis
-- errors are caught here, in a subtransaction, and returned as their message.
CREATE FUNCTION retention._predicate_check(rel oid, predicate text, author oid, built_in_only boolean)
RETURNS text
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
    RETURN retention._predicate_problem(rel, predicate, author, built_in_only);
EXCEPTION WHEN OTHERS THEN
    RETURN SQLERRM;
END
$fn$;

CREATE FUNCTION retention.add_policy(
    name text,
    relation regclass,
    kind text,
    age_column text DEFAULT NULL,
    older_than interval DEFAULT NULL,
    scope text DEFAULT NULL,
    terminal text DEFAULT NULL,
    group_by text[] DEFAULT NULL,
    order_by text DEFAULT NULL,
    keep int DEFAULT NULL,
    min_keep int DEFAULT NULL,
    action text DEFAULT 'delete',
    batch_size int DEFAULT 5000,
    max_rows_per_run bigint DEFAULT 1000000,
    keep_floor int DEFAULT NULL,
    window_floor interval DEFAULT NULL,
    archive_keep interval DEFAULT NULL,
    lease_table regclass DEFAULT NULL,
    lease_key text[] DEFAULT NULL,
    lease_expiry text DEFAULT NULL,
    search_path text[] DEFAULT NULL,
    age_expression text DEFAULT NULL,
    age_table regclass DEFAULT NULL,
    age_table_column text DEFAULT NULL,
    age_pick text DEFAULT NULL,
    terminal_table regclass DEFAULT NULL,
    terminal_table_where text DEFAULT NULL,
    terminal_table_test text DEFAULT NULL,
    visible_rows_only boolean DEFAULT NULL,
    max_table_rows bigint DEFAULT NULL,
    mutable_columns text[] DEFAULT NULL,
    mutable_guard text DEFAULT NULL,
    record_keys boolean DEFAULT NULL,
    delete_after interval DEFAULT NULL
) RETURNS bigint
LANGUAGE sql AS $fn$
    SELECT retention._define_policy('add', pg_catalog.jsonb_build_object(
        'name', name, 'relation', relation::oid::bigint, 'kind', kind, 'age_column', age_column,
        'older_than', older_than::text, 'scope', scope, 'terminal', terminal, 'group_by', group_by,
        'order_by', order_by, 'keep', keep, 'min_keep', min_keep, 'action', action,
        'batch_size', batch_size, 'max_rows_per_run', max_rows_per_run,
        'keep_floor', keep_floor, 'window_floor', window_floor::text,
        'archive_keep', archive_keep::text, 'lease_table', lease_table::oid::bigint,
        'lease_key', lease_key, 'lease_expiry', lease_expiry, 'search_path', search_path,
        'age_expression', age_expression, 'age_table', age_table::oid::bigint,
        'age_table_column', age_table_column, 'age_pick', age_pick,
        'terminal_table', terminal_table::oid::bigint, 'terminal_table_where', terminal_table_where,
        'terminal_table_test', terminal_table_test, 'visible_rows_only', visible_rows_only,
        'max_table_rows', max_table_rows, 'mutable_columns', mutable_columns,
        'mutable_guard', mutable_guard, 'record_keys', record_keys,
        'delete_after', delete_after::text));
$fn$;

CREATE FUNCTION retention.alter_policy(
    name text,
    kind text DEFAULT NULL,
    age_column text DEFAULT NULL,
    older_than interval DEFAULT NULL,
    scope text DEFAULT NULL,
    terminal text DEFAULT NULL,
    group_by text[] DEFAULT NULL,
    order_by text DEFAULT NULL,
    keep int DEFAULT NULL,
    min_keep int DEFAULT NULL,
    action text DEFAULT NULL,
    batch_size int DEFAULT NULL,
    max_rows_per_run bigint DEFAULT NULL,
    keep_floor int DEFAULT NULL,
    window_floor interval DEFAULT NULL,
    archive_keep interval DEFAULT NULL,
    lease_table regclass DEFAULT NULL,
    lease_key text[] DEFAULT NULL,
    lease_expiry text DEFAULT NULL,
    search_path text[] DEFAULT NULL,
    age_expression text DEFAULT NULL,
    age_table regclass DEFAULT NULL,
    age_table_column text DEFAULT NULL,
    age_pick text DEFAULT NULL,
    terminal_table regclass DEFAULT NULL,
    terminal_table_where text DEFAULT NULL,
    terminal_table_test text DEFAULT NULL,
    visible_rows_only boolean DEFAULT NULL,
    max_table_rows bigint DEFAULT NULL,
    mutable_columns text[] DEFAULT NULL,
    mutable_guard text DEFAULT NULL,
    record_keys boolean DEFAULT NULL,
    delete_after interval DEFAULT NULL
) RETURNS bigint
LANGUAGE sql AS $fn$
    SELECT retention._define_policy('alter', pg_catalog.jsonb_build_object(
        'name', name, 'kind', kind, 'age_column', age_column, 'older_than', older_than::text,
        'scope', scope, 'terminal', terminal, 'group_by', group_by, 'order_by', order_by,
        'keep', keep, 'min_keep', min_keep, 'action', action, 'batch_size', batch_size,
        'max_rows_per_run', max_rows_per_run, 'keep_floor', keep_floor,
        'window_floor', window_floor::text, 'archive_keep', archive_keep::text,
        'lease_table', lease_table::oid::bigint, 'lease_key', lease_key, 'lease_expiry', lease_expiry,
        'search_path', search_path, 'age_expression', age_expression,
        'age_table', age_table::oid::bigint, 'age_table_column', age_table_column,
        'age_pick', age_pick, 'terminal_table', terminal_table::oid::bigint,
        'terminal_table_where', terminal_table_where, 'terminal_table_test', terminal_table_test,
        'visible_rows_only', visible_rows_only, 'max_table_rows', max_table_rows,
        'mutable_columns', mutable_columns, 'mutable_guard', mutable_guard,
        'record_keys', record_keys, 'delete_after', delete_after::text));
$fn$;

-- Lowers a policy's keep_floor and/or window_floor (NULL: that floor unchanged; 0 or
-- '0 seconds': none), a new version of the policy and a 'lower_floor' ledger entry naming who
-- and why. Raising goes through alter_policy; nothing else lowers a floor.
CREATE FUNCTION retention.lower_floor(policy text, keep_floor int, window_floor interval, actor text, reason text)
RETURNS bigint
LANGUAGE sql
AS $fn$ SELECT retention._lower_floor(policy, keep_floor, window_floor::text, actor, reason) $fn$;

CREATE FUNCTION retention.enable_policy(name text) RETURNS bigint
LANGUAGE sql
AS $fn$ SELECT retention._set_policy_state(name, 'enable') $fn$;

CREATE FUNCTION retention.disable_policy(name text) RETURNS bigint
LANGUAGE sql
AS $fn$ SELECT retention._set_policy_state(name, 'disable') $fn$;

CREATE FUNCTION retention.drop_policy(name text) RETURNS bigint
LANGUAGE sql
AS $fn$ SELECT retention._set_policy_state(name, 'drop') $fn$;

CREATE FUNCTION retention.link_windows(producer text, consumer text, margin interval) RETURNS void
LANGUAGE sql
AS $fn$ SELECT retention._link_windows(producer, consumer, margin::text) $fn$;

CREATE FUNCTION retention.place_hold(relation regclass, predicate text, reason text, actor text,
                                     enforce boolean DEFAULT false)
RETURNS bigint
LANGUAGE sql
AS $fn$ SELECT retention._place_hold(relation::oid, predicate, reason, actor, enforce) $fn$;

-- Deletes those of `keys` (as retention.candidates lists them) that are still eligible, in the
-- caller's transaction (engine/candidates.rs).
CREATE FUNCTION retention.prune(policy text, keys jsonb) RETURNS bigint
LANGUAGE sql
AS $fn$ SELECT retention._prune(policy, keys) $fn$;

-- Declares what a table's rows are for retention (api/class.rs).
CREATE FUNCTION retention.classify(relation regclass, class text, reason text) RETURNS void
LANGUAGE sql
AS $fn$ SELECT retention._classify(relation::oid, class, reason) $fn$;

-- Triggers of enforced holds (api/hold.rs installs them): a row an enforced hold covers is not
-- updated or deleted, and a table with one is not truncated, by anyone but an erasure.
-- SECURITY DEFINER: they fire as whoever writes, who needs nothing of schema retention; each
-- hold's predicate runs as the role that placed it.
CREATE FUNCTION retention._hold_enforce() RETURNS trigger
LANGUAGE c SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'pg_retention_hold_enforce';

CREATE FUNCTION retention._hold_enforce_truncate() RETURNS trigger
LANGUAGE c SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'pg_retention_hold_enforce_truncate';

CREATE FUNCTION retention.lift_hold(hold_id bigint, actor text, reason text) RETURNS void
LANGUAGE sql
AS $fn$ SELECT retention._lift_hold(hold_id, actor, reason) $fn$;

-- Pull consumers (api/consumer.rs): a registration's epoch, reports of the position processed,
-- and what each pins.
CREATE FUNCTION retention.register_consumer(policy text, consumer text, lease interval,
                                            reporter regrole DEFAULT NULL) RETURNS bigint
LANGUAGE sql
AS $fn$ SELECT retention._register_consumer(policy, consumer, lease::text, reporter::oid) $fn$;

CREATE FUNCTION retention.report_position(policy text, consumer text, epoch bigint, "position" text)
RETURNS text
LANGUAGE sql
AS $fn$ SELECT retention._report_position(policy, consumer, epoch, $4) $fn$;

CREATE FUNCTION retention.unregister_consumer(policy text, consumer text) RETURNS void
LANGUAGE sql
AS $fn$ SELECT retention._unregister_consumer(policy, consumer) $fn$;

CREATE FUNCTION retention.consumer_status(policy text, consumer text)
RETURNS TABLE (epoch bigint, floor text, requires_bootstrap boolean, lease_expires_at timestamptz,
               pinning boolean)
LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $fn$
    SELECT r.epoch, r.floor, r.requires_bootstrap, r.lease_expires_at::timestamptz, r.pinning
      FROM retention._consumer_status(policy, consumer) r
$fn$;

-- What the live consumers of a policy pin, for the statements that delete (which run as the
-- policy's owner and read it once per statement): 'none' (no live consumer), 'all' (one has
-- not reported in its epoch yet), or 'floor' (rows from the lowest of _consumer_positions on stay).
CREATE FUNCTION retention._consumer_pins(policy_id bigint) RETURNS text
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
    SELECT CASE WHEN count(*) = 0 THEN 'none' WHEN bool_or(c.position IS NULL) THEN 'all' ELSE 'floor' END
      FROM retention.consumer_registrations c
     WHERE c.policy_id = _consumer_pins.policy_id AND c.expires_at > now()
$fn$;

-- The positions the live consumers of a policy reported, as text: the statements that delete
-- (which run as the policy's owner) cast them to the order column's type themselves, so a
-- domain's CHECK runs as that owner and the type comes from the catalog, not from a caller.
CREATE FUNCTION retention._consumer_positions(policy_id bigint) RETURNS SETOF text
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
    SELECT c.position FROM retention.consumer_registrations c
     WHERE c.policy_id = _consumer_positions.policy_id AND c.expires_at > now()
$fn$;

-- retention.replay_floor(policy) and retention.check_replay(policy, from_ts), the replay
-- boundary of a policy's window, are in Rust: src/api/replay.rs.

-- Policies in the order a run takes them: enabled delete-action policies, children before
-- parents (a table that references another is swept first), then producers before their
-- consumers (window links), then by name.
CREATE FUNCTION retention._run_order(policy text) RETURNS TABLE (id bigint, name text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
    WITH RECURSIVE pol AS (
        SELECT p.id, p.name, p.relation::oid AS rel FROM retention.policies p
         WHERE p.enabled AND p.action = 'delete' AND (_run_order.policy IS NULL OR p.name = _run_order.policy)
    ), up(rel, depth) AS (
        SELECT rel, 0 FROM pol
        UNION ALL
        SELECT c.confrelid, up.depth + 1
          FROM up JOIN pg_constraint c ON c.contype = 'f' AND c.conrelid = up.rel AND c.confrelid <> c.conrelid
         WHERE up.depth < 32
    ), downstream(id, depth) AS (
        -- How many producers are upstream of a policy through window links: a producer (an
        -- outbox) is swept before its consumer (the inbox that dedups its replays), so a run
        -- that stops between them leaves the consumer's records longer, the safe direction.
        SELECT id, 0 FROM pol
        UNION ALL
        SELECT l.consumer_id, downstream.depth + 1
          FROM downstream JOIN retention.window_links l ON l.producer_id = downstream.id
         WHERE downstream.depth < 32
    )
    SELECT pol.id, pol.name FROM pol
      LEFT JOIN (SELECT up.rel, max(up.depth) AS depth FROM up GROUP BY up.rel) d ON d.rel = pol.rel
      LEFT JOIN (SELECT downstream.id, max(downstream.depth) AS depth FROM downstream GROUP BY downstream.id) w
             ON w.id = pol.id
     ORDER BY coalesce(d.depth, 0), coalesce(w.depth, 0), pol.name;
$fn$;

-- The advisory-lock key of a policy: one pruner per policy, manual runs and workers alike.
CREATE FUNCTION retention._lock_key(policy_id bigint) RETURNS bigint
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog
AS $fn$ SELECT (x'52544e00'::bigint << 32) | policy_id $fn$;




-- Sweeps delete-action policies now (one, or all when policy is NULL), committing after every
-- step. A policy whose lock is held by another pruner is skipped and that is ledgered. When
-- any policy's run ended in error, raises RT601 at the end, naming them (what succeeded is
-- committed), so a scheduler records the job as failed.
--
-- A run is the run driver's (engine/sweep/driver.rs, which the worker calls directly): this
-- procedure only holds its token and COMMITs between its parts, waiting out a pause between
-- two steps outside their transactions (the driver times the pause and ledgers it once over).
CREATE PROCEDURE retention.run(policy text DEFAULT NULL)
LANGUAGE plpgsql AS $fn$
DECLARE
    p record;
    token bigint;
    pause float8;
    r record;
    n int := 0;
    failed text[] := '{}';
BEGIN
    IF run.policy IS NOT NULL AND NOT EXISTS (SELECT 1 FROM retention.policies x WHERE x.name = run.policy) THEN
        RAISE EXCEPTION 'policy % does not exist', run.policy USING ERRCODE = '42704', HINT = 'See retention.policies.';
    END IF;
    FOR p IN SELECT * FROM retention._run_order(run.policy) LOOP
        n := n + 1;
        token := retention._run_begin(p.id);
        COMMIT;
        IF token IS NULL THEN
            RAISE NOTICE 'policy %: skipped, another pruner holds its lock', p.name;
            CONTINUE;
        END IF;
        LOOP
            pause := retention._run_advance(token);
            EXIT WHEN pause IS NULL;
            IF pause > 0 THEN
                PERFORM pg_sleep(least(pause, 0.5));
            END IF;
            COMMIT;
        END LOOP;
        SELECT * INTO r FROM retention._run_end(token);
        COMMIT;
        RAISE NOTICE 'policy %: % (% rows deleted in % batches)%', p.name, r.outcome,
            r.deleted, r.batches, coalesce(': ' || r.reason, '');
        IF r.outcome = 'error' THEN
            failed := failed || format('%s (ledger id %s)', p.name,
                (SELECT max(l.id) FROM retention.ledger l WHERE l.policy = p.name AND l.method = 'run'));
        END IF;
    END LOOP;
    IF n = 0 THEN
        RAISE NOTICE 'no enabled delete-action policy to run';
    END IF;
    IF cardinality(failed) > 0 THEN
        RAISE EXCEPTION 'retention.run(): % of % policies ended in error: %', cardinality(failed), n,
                array_to_string(failed, ', ')
            USING ERRCODE = 'RT601',
                  DETAIL = 'What the other policies deleted is committed; each failed run is ledgered (method run, outcome error) with its error.',
                  HINT = 'See retention.ledger for the ledger ids named, and retention.health().';
    END IF;
END
$fn$;

-- Ledgers that a run skipped a policy because another pruner holds its lock.
CREATE FUNCTION retention._ledger_skip_locked(policy_id bigint, actor text) RETURNS void
LANGUAGE sql STRICT SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
    SELECT retention._ledger_append('skip_locked', _ledger_skip_locked.actor,
                                    jsonb_build_object('reason', 'another pruner holds the policy lock'),
                                    _ledger_skip_locked.policy_id);
$fn$;

-- ---- The background worker: its state, its steps, wake() and health(). ----

-- Registers a worker's visit to this database: `visiting` is false when a worker of another
-- visit is still alive here (the new one then ends); a previous visit that ended while
-- sweeping (its process gone) crashed, and is ledgered. `resume` is what an earlier visit left
-- of the cycle (NULL: a new cycle starts).
CREATE FUNCTION retention._worker_visit(OUT visiting boolean, OUT resume bigint[])
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
    prev retention.worker_state;
BEGIN
    -- One visit registers at a time per database.
    PERFORM pg_advisory_xact_lock(hashtext('pg_retention worker_state'), hashtext(current_database()));
    SELECT * INTO prev FROM retention.worker_state w WHERE w.database = current_database();
    IF FOUND AND prev.state IN ('sweeping', 'paused') AND prev.pid IS DISTINCT FROM pg_backend_pid() THEN
        IF retention._is_worker(prev.pid) THEN
            visiting := false;
            RETURN;
        END IF;
        PERFORM retention._ledger_append('worker_crash', 'worker',
                jsonb_build_object('previous_pid', prev.pid, 'previous_state', prev.state,
                                   'policy', prev.current_policy),
                NULL, prev.current_policy);
        RAISE WARNING 'pg_retention: the previous visit to database % (pid %) ended without stopping cleanly while %',
            current_database(), prev.pid, prev.state;
    END IF;
    visiting := true;
    resume := prev.cycle_resume;
    INSERT INTO retention.worker_state (database, pid, state, started_at, last_cycle_start, updated_at)
    VALUES (current_database(), pg_backend_pid(), 'sweeping', clock_timestamp(), clock_timestamp(), clock_timestamp())
    ON CONFLICT (database) DO UPDATE
       SET pid = EXCLUDED.pid, state = 'sweeping', current_policy = NULL, started_at = EXCLUDED.started_at,
           last_cycle_start = CASE WHEN resume IS NULL THEN EXCLUDED.last_cycle_start
                                   ELSE worker_state.last_cycle_start END,
           next_wake = NULL, paused_since = NULL, pause_reason = NULL, updated_at = EXCLUDED.updated_at;
END
$fn$;

-- Records the visiting worker's state and the policy it sweeps.
CREATE FUNCTION retention._worker_set(state text, policy text) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
    UPDATE retention.worker_state w SET
        state = $1,
        current_policy = $2,
        updated_at = clock_timestamp(),
        paused_since = NULL,
        pause_reason = NULL
    WHERE w.database = current_database() AND $1 IS NOT NULL;
$fn$;

-- Records the end of a visit: `resume` is what it left of the cycle (NULL: the cycle is
-- complete), next_visit_secs when the database is due again.
CREATE FUNCTION retention._worker_visit_end(state text, resume bigint[], next_visit_secs float8)
RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
    UPDATE retention.worker_state w SET
        state = $1,
        current_policy = NULL,
        cycle_resume = $2,
        last_cycle_end = CASE WHEN $2 IS NULL THEN clock_timestamp() ELSE w.last_cycle_end END,
        last_visit_end = clock_timestamp(),
        next_wake = clock_timestamp() + make_interval(secs => $3),
        updated_at = clock_timestamp(),
        paused_since = NULL,
        pause_reason = NULL
    WHERE w.database = current_database() AND $1 IS NOT NULL AND $3 IS NOT NULL;
$fn$;

-- The worker's sweep of `policy` waits between steps (pacing), since the first call of a pause.
CREATE FUNCTION retention._worker_pause(policy text, reason text) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
    UPDATE retention.worker_state w SET
        state = 'paused',
        current_policy = $1,
        paused_since = CASE WHEN w.state = 'paused' THEN w.paused_since ELSE clock_timestamp() END,
        pause_reason = $2,
        updated_at = clock_timestamp()
    WHERE w.database = current_database();
$fn$;

-- Ledgers a pause of a sweep between two steps, once it is over: why and for how long.
CREATE FUNCTION retention._ledger_pause(policy_id bigint, reason text, seconds float8, actor text)
RETURNS void
LANGUAGE sql STRICT SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
    SELECT retention._ledger_append('pause', actor,
        jsonb_build_object('reason', reason, 'seconds', round(seconds::numeric, 3)), policy_id);
$fn$;

-- Ledgers the policies a cycle did not reach because the cycle cap was hit.
CREATE FUNCTION retention._worker_cycle_cap(cap bigint, skipped text[]) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
    SELECT retention._ledger_append('cycle_cap', 'worker',
               jsonb_build_object('warning', 'cycle cap reached before this policy ran', 'cap', $1), p.id)
      FROM retention.policies p WHERE p.name = ANY ($2);
$fn$;



-- Asks for a visit to this database now (the launcher gives it the next free worker, after
-- a visit under way ends). Returns whether the launcher was told.
CREATE FUNCTION retention.wake() RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
    UPDATE retention.worker_state w SET wake_requested_at = clock_timestamp()
     WHERE w.database = current_database();
    RETURN retention._wake_launcher();
END
$fn$;

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

-- ---- Archive-then-prune. ----

-- Guard trigger of archive policies (src/guard.rs): refuses (RT501) to update a row that is
-- already archive-eligible, but for the policy's mutable_columns. TG_ARGV[0] is the policy id,
-- TG_ARGV[1] its name. Eligibility is evaluated with the privileges of the policy's owner, not
-- of whoever updates the table. SECURITY DEFINER: a writer needs its table privileges and
-- nothing of schema retention (it fires as whoever updates; the predicate runs as its author).
-- The three triggers are C functions so that their refusals carry no procedural frame.
CREATE FUNCTION retention._fixpoint_guard() RETURNS trigger
LANGUAGE c SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'pg_retention_fixpoint_guard';

-- retention._below (a table and every partition under it) and retention._tree_of (the tables
-- that share rows with a table) are in Rust: src/catalog/tree.rs.

-- How many holds have ever reached a table's rows: the hold fence of the delete statements,
-- which run as a policy's owner and cannot read the catalog themselves.
CREATE FUNCTION retention._hold_count(relation oid) RETURNS bigint
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$ SELECT count(*) FROM retention.hold_records h
         WHERE h.relation::oid IN (SELECT retention._tree_of(_hold_count.relation)) $fn$;

-- The first and last keys of the live (claimed) batches of a table, for a claim's statement
-- that runs as the policy's owner: it casts them to the key's types as that role.
CREATE FUNCTION retention._live_batches(relation oid) RETURNS TABLE (first_key text[], last_key text[])
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$ SELECT b.first_key, b.last_key FROM retention.batches b
         WHERE b.relation = _live_batches.relation AND b.state = 'claimed' AND b.first_key IS NOT NULL $fn$;

-- The archive protocol. Each wrapper pins the settings that shape text output, so a batch's
-- rows render to the same bytes in batch_frames and complete_batch whatever the session says.
CREATE FUNCTION retention.claim_batch(policy text, max_rows int DEFAULT 10000,
                                      lease interval DEFAULT '10 minutes', owner text DEFAULT NULL)
RETURNS uuid
LANGUAGE sql SET search_path = pg_catalog, pg_temp
    SET TimeZone = 'UTC' SET DateStyle = 'ISO, YMD' SET IntervalStyle = 'postgres'
    SET extra_float_digits = 1 SET bytea_output = 'hex'
AS $fn$ SELECT retention._claim_batch(policy, max_rows, lease::text, owner)::uuid $fn$;

-- claim_batch and batch_slice in one call: the slice is rendered from the rows the claim reads
-- and locks, so they are read once. A resumed batch is rendered from its key set; resume =>
-- false leaves the owner's unfinished batch alone (an archiver with a batch in flight).
-- (NULL, NULL) when nothing is claimable.
CREATE FUNCTION retention.claim_slice(policy text, max_rows int DEFAULT 10000,
                                      lease interval DEFAULT '10 minutes', owner text DEFAULT NULL,
                                      resume boolean DEFAULT true,
                                      OUT batch uuid, OUT slice bytea, OUT more boolean)
LANGUAGE sql SET search_path = pg_catalog, pg_temp
    SET TimeZone = 'UTC' SET DateStyle = 'ISO, YMD' SET IntervalStyle = 'postgres'
    SET extra_float_digits = 1 SET bytea_output = 'hex'
AS $fn$ SELECT c.batch::uuid, c.slice, c.more
          FROM retention._claim_slice(policy, max_rows, lease::text, owner, resume) c $fn$;

-- claim_slice without the slice in its result: it stays in this backend, and
-- retention.claimed_slice(batch) returns it once, in 64 kB pieces, straight from C (the SQL
-- layers copied the whole slice three times). bytes: its length; manifest: batch_manifest(batch,
-- false). (NULL, NULL, false, NULL) when nothing is claimable.
CREATE FUNCTION retention.claim_next(policy text, max_rows int DEFAULT 10000,
                                     lease interval DEFAULT '10 minutes', owner text DEFAULT NULL,
                                     resume boolean DEFAULT true,
                                     OUT batch uuid, OUT bytes bigint, OUT more boolean,
                                     OUT manifest jsonb)
LANGUAGE sql SET search_path = pg_catalog, pg_temp
    SET TimeZone = 'UTC' SET DateStyle = 'ISO, YMD' SET IntervalStyle = 'postgres'
    SET extra_float_digits = 1 SET bytea_output = 'hex'
AS $fn$ SELECT c.batch::uuid, c.bytes, c.more, c.manifest
          FROM retention._claim_next(policy, max_rows, lease::text, owner, resume) c $fn$;

-- The enabled archive policies: what an archiver has to work on.
CREATE FUNCTION retention.archive_policies() RETURNS SETOF text
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$ SELECT p.name FROM retention.policies p WHERE p.enabled AND p.action IN ('archive_then_delete', 'archive') ORDER BY p.name $fn$;

-- Deletes the rows of a two-window policy's archived batches that are past its delete_after,
-- each only as the version its verified archive holds (archive/deferred.rs); the rows deleted.
-- The archiver calls it for every policy at each pass; 0 for a policy without delete_after.
CREATE FUNCTION retention.prune_archived(policy text, max_batches int DEFAULT 100) RETURNS bigint
LANGUAGE sql
AS $fn$ SELECT retention._prune_archived(policy, max_batches) $fn$;

CREATE FUNCTION retention.batch_manifest(batch uuid, digest boolean DEFAULT true) RETURNS jsonb
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
    SET TimeZone = 'UTC' SET DateStyle = 'ISO, YMD' SET IntervalStyle = 'postgres'
    SET extra_float_digits = 1 SET bytea_output = 'hex'
AS $fn$ SELECT retention._batch_manifest(batch::text, digest) $fn$;

CREATE FUNCTION retention.batch_frames(batch uuid) RETURNS SETOF bytea
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
    SET TimeZone = 'UTC' SET DateStyle = 'ISO, YMD' SET IntervalStyle = 'postgres'
    SET extra_float_digits = 1 SET bytea_output = 'hex'
AS $fn$ SELECT f FROM retention._batch_frames(batch::text) f $fn$;

-- The frames of batch_frames concatenated: the slice, in one value (one call, one copy).
CREATE FUNCTION retention.batch_slice(batch uuid) RETURNS bytea
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
    SET TimeZone = 'UTC' SET DateStyle = 'ISO, YMD' SET IntervalStyle = 'postgres'
    SET extra_float_digits = 1 SET bytea_output = 'hex'
AS $fn$ SELECT retention._batch_slice(batch::text) $fn$;

CREATE FUNCTION retention.extend_lease(batch uuid, lease interval) RETURNS timestamptz
LANGUAGE sql
AS $fn$ SELECT retention._extend_lease(batch::text, lease::text)::timestamptz $fn$;

-- `cause` (refused, failed, stopped) is what the failure counters count the release under; a
-- release without one (an archiver before 0.5.0) is counted by its reason's first word.
CREATE FUNCTION retention.release_batch(batch uuid, reason text, cause text DEFAULT NULL) RETURNS boolean
LANGUAGE sql
AS $fn$ SELECT retention._release_batch(batch::text, reason, cause) $fn$;

CREATE FUNCTION retention.complete_batch(batch uuid, object_key text, blake3 text, rows bigint, bytes bigint,
                                         owner text DEFAULT NULL)
RETURNS bigint
LANGUAGE sql SET search_path = pg_catalog, pg_temp
    SET TimeZone = 'UTC' SET DateStyle = 'ISO, YMD' SET IntervalStyle = 'postgres'
    SET extra_float_digits = 1 SET bytea_output = 'hex'
AS $fn$ SELECT retention._complete_batch(batch::text, object_key, blake3, rows, bytes, owner) $fn$;

-- Archive lifecycle (archive/expiry.rs; the archiver's `expire`, archiver/src/expire/):
-- archives past their policy's archive_keep and the holds over an archive's rows. The expire
-- operations themselves (retention.expire_prepare, expire_state, expire_record) are declared
-- by archive/expire_operation.rs; their state is retention.expire_operations
-- (catalog/expire_operation.rs), their history the ledger's expire_prepare and expire_apply
-- entries.
CREATE FUNCTION retention.expiry_candidates()
RETURNS TABLE (policy text, policy_version int, archive_keep interval, archive_id bigint, batch uuid,
               object_key text, rows bigint, bytes bigint, archived_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
    SELECT p.name, p.version, p.archive_keep, a.id, a.batch, a.object_key, a.rows, a.bytes, a.archived_at
      FROM retention.policies p
      JOIN retention.batches b ON b.policy_id = p.id
      JOIN retention.archives a ON a.batch = b.id
     WHERE p.action IN ('archive_then_delete', 'archive') AND p.archive_keep IS NOT NULL
       AND a.archived_at < now() - p.archive_keep
       AND a.expired_at IS NULL
       -- A two-window policy's archive does not expire while its rows wait for their
       -- delete_after: their delete stands on it.
       AND NOT (b.state = 'archived' AND p.delete_after IS NOT NULL)
     ORDER BY p.name, a.id
$fn$;

CREATE FUNCTION retention.archive_holds(archive_id bigint, slice bytea, columns text[]) RETURNS bigint[]
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
    SELECT retention._archive_holds(archive_id, slice, columns)
$fn$;

-- What the archiver's sweep-orphans must not touch: every archive's slice key now and as
-- first recorded, the keys a rewrite replaced until they are deleted, the keys an open
-- supersession writes (retention._rewrite_key; each manifest beside its slice), and the ids
-- of live batches (their objects are named after them).
CREATE FUNCTION retention.archive_object_refs(OUT archived text[], OUT live_batches text[])
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
    SELECT ARRAY(SELECT a.object_key FROM retention.archives a
                 UNION SELECT a.object_key FROM retention.archive_records a
                 UNION SELECT s.replaced_key FROM retention.supersessions s WHERE s.state = 'rewritten'
                 UNION SELECT retention._rewrite_key(a.object_key, s.id)
                         FROM retention.supersessions s JOIN retention.archive_records a ON a.id = s.archive_id
                        WHERE s.state = 'pending'
                 ORDER BY 1),
           ARRAY(SELECT b.id::text FROM retention.batches b WHERE b.state = 'claimed' ORDER BY 1)
$fn$;

-- ---- Metrics (docs/observability.md). ----

-- Every metric of the database, one row per sample: name, labels, value, help, type. Every
-- family is named and described in api/metrics.rs; the archiver's /metrics (also in its
-- metrics-only mode) and the exporter queries in deploy/ read this. Declared here, not by
-- pgrx: it returns its rows in one call (materialize mode), kept in memory up to work_mem (about
-- 5 MB at 1,000 policies).
CREATE FUNCTION retention.metrics()
RETURNS TABLE (name text, labels jsonb, value float8, help text, type text)
LANGUAGE c SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET work_mem = '32MB'
AS 'MODULE_PATHNAME', 'retention_metrics';

-- ---- Erasure (api/erasure.rs, engine/erase.rs) and archive supersession (archive/supersede.rs;
-- the archiver's archiver/src/supersede.rs). ----

-- Deletes the rows of `relation` that match `predicate` now, whatever policies and holds say,
-- in statements of at most 10,000 rows, in the caller's transaction; archives with rows of the
-- table get a pending supersession. Returns the rows deleted.
CREATE FUNCTION retention.erase(relation regclass, predicate text, request_ref text, actor text)
RETURNS bigint
LANGUAGE sql SET search_path = pg_catalog, pg_temp
AS $fn$ SELECT e.deleted FROM retention._erase(relation::oid, predicate, request_ref, actor, NULL) e $fn$;

-- erase() for large sets: each batch of at most batch_rows rows commits with its ledger entry.
-- A failure leaves the batches before it erased and ledgered; calling again goes on.
CREATE PROCEDURE retention.erase_in_batches(relation regclass, predicate text, request_ref text,
                                            actor text, batch_rows int DEFAULT 10000,
                                            INOUT erased bigint DEFAULT NULL)
LANGUAGE plpgsql AS $fn$
DECLARE
    st record;
BEGIN
    erased := 0;
    LOOP
        SELECT e.deleted, e.done INTO st
          FROM retention._erase(erase_in_batches.relation::oid, erase_in_batches.predicate,
                                erase_in_batches.request_ref, erase_in_batches.actor,
                                erase_in_batches.batch_rows) e;
        erased := erased + st.deleted;
        COMMIT;
        EXIT WHEN st.done;
    END LOOP;
END
$fn$;

-- The key a supersession writes the rewritten slice under: the original's, marked with the
-- supersession (create-only, so a retry after a crash finds its own bytes there).
CREATE FUNCTION retention._rewrite_key(original text, supersession bigint) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $fn$
    SELECT regexp_replace(original, '\.slice$', '') || '.s' || supersession || '.slice'
$fn$;

-- The open supersessions, oldest first, one per archive (an archive's supersessions run in id
-- order): pending ones with the archive's object now, rewritten ones with the key to delete.
CREATE FUNCTION retention.open_supersessions(max int DEFAULT 100)
RETURNS TABLE (id bigint, archive_id bigint, state text, request_ref text, object_key text,
               blake3 text, rows bigint, bytes bigint, replaced_key text, rewrite_key text,
               requested_at text, expired boolean, policy text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
    SELECT s.id, s.archive_id, s.state, s.request_ref, a.object_key, a.blake3, a.rows, a.bytes,
           s.replaced_key, retention._rewrite_key(a.original_key, s.id),
           to_char(s.requested_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
           a.expired_at IS NOT NULL, a.policy
      FROM retention.supersessions s
      JOIN retention.archives a ON a.id = s.archive_id
     WHERE s.state IN ('pending', 'rewritten')
       AND NOT EXISTS (SELECT 1 FROM retention.supersessions o
                        WHERE o.archive_id = s.archive_id AND o.state IN ('pending', 'rewritten')
                          AND o.id < s.id)
     ORDER BY s.id
     LIMIT greatest(max, 0)
$fn$;

-- The 0-based positions of the slice's rows that the supersession's erasure matches, its
-- predicate evaluated as its author (the slice is checked against the archive's object first).
CREATE FUNCTION retention.supersession_matches(supersession bigint, slice bytea, columns text[])
RETURNS int[]
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
    SELECT retention._supersession_matches(supersession, slice, columns)::int[]
$fn$;

-- A pending supersession with nothing to rewrite.
CREATE FUNCTION retention.supersession_unaffected(supersession bigint, reason text) RETURNS boolean
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
    SELECT retention._supersession_unaffected(supersession, reason)
$fn$;

-- Records the verified rewrite of a pending supersession: it is the archive's object from now
-- on. False when it was recorded already (by this archiver before a crash, or another).
CREATE FUNCTION retention.supersession_rewritten(supersession bigint, replaced_key text, object_key text,
                                                 blake3 text, rows bigint, bytes bigint, supersedes text)
RETURNS boolean
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
    SELECT retention._supersession_rewritten(supersession, replaced_key, object_key,
                                             blake3, rows, bytes, supersedes)
$fn$;

-- The replaced objects are deleted: the supersession is done, and ledgered. False when it
-- was done already.
CREATE FUNCTION retention.supersession_done(supersession bigint, actor text) RETURNS boolean
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
    SELECT retention._supersession_done(supersession, actor)
$fn$;

-- What the index says of an object key (a slice's or its manifest's): 'current' (an archive's
-- object now) or 'superseded' (a rewrite replaced it), with the archive's key now; no row when
-- no archive knows it.
CREATE FUNCTION retention.archive_object_state(key text, OUT state text, OUT current_key text)
RETURNS SETOF record
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
    WITH k(slice) AS (SELECT regexp_replace(key, '\.manifest\.json$', '.slice'))
    SELECT CASE WHEN a.object_key = k.slice THEN 'current' ELSE 'superseded' END, a.object_key
      FROM retention.archives a, k
     WHERE a.object_key = k.slice OR a.original_key = k.slice
        OR EXISTS (SELECT 1 FROM retention.supersessions s
                    WHERE s.archive_id = a.id AND s.replaced_key = k.slice
                      AND s.state IN ('rewritten', 'done'))
     LIMIT 1
$fn$;

-- Ledgers the objects sweep-orphans deleted.
CREATE FUNCTION retention.ledger_orphan_objects(objects bigint, bytes bigint, keys text[], actor text)
RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
    SELECT retention._ledger_append('orphan_object_sweep', actor,
        jsonb_build_object('objects', objects, 'bytes', bytes, 'keys', to_jsonb(coalesce(keys, '{}'))), NULL)
$fn$;

-- Privileges: nothing to PUBLIC; administrators get the public surface; the internals stay
-- with the owner except the run protocol, which run() (SECURITY INVOKER, it commits) calls:
-- it carries a token of a run kept in the backend, never a state the engine would trust.
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA retention FROM PUBLIC;
REVOKE ALL ON ALL PROCEDURES IN SCHEMA retention FROM PUBLIC;
GRANT EXECUTE ON FUNCTION retention.version() TO PUBLIC;
-- What the SECURITY INVOKER wrappers call: each internal to the roles of its wrapper.
GRANT EXECUTE ON FUNCTION retention._define_policy(text, jsonb),
    retention._lower_floor(text, int, text, text, text), retention._set_policy_state(text, text),
    retention._link_windows(text, text, text), retention._place_hold(oid, text, text, text, boolean),
    retention._lift_hold(bigint, text, text), retention._register_consumer(text, text, text, oid),
    retention._classify(oid, text, text), retention._prune(text, jsonb),
    retention._prune_archived(text, int),
    retention._unregister_consumer(text, text)
    TO retention_admin;
GRANT EXECUTE ON FUNCTION retention._report_position(text, text, bigint, text),
    retention._consumer_status(text, text)
    TO retention_admin, retention_consumer;
GRANT EXECUTE ON FUNCTION retention._claim_batch(text, int, text, text),
    retention._claim_slice(text, int, text, text, boolean),
    retention._claim_next(text, int, text, text, boolean),
    retention._extend_lease(text, text), retention._release_batch(text, text, text),
    retention._complete_batch(text, text, text, bigint, bigint, text),
    retention._prune_archived(text, int)
    TO retention_archiver;
GRANT EXECUTE ON FUNCTION retention._erase(oid, text, text, text, int) TO retention_eraser;
GRANT EXECUTE ON FUNCTION
    retention.add_policy(text, regclass, text, text, interval, text, text, text[], text, int, int, text, int, bigint, int, interval, interval, regclass, text[], text, text[], text, regclass, text, text, regclass, text, text, boolean, bigint, text[], text, boolean, interval),
    retention.alter_policy(text, text, text, interval, text, text, text[], text, int, int, text, int, bigint, int, interval, interval, regclass, text[], text, text[], text, regclass, text, text, regclass, text, text, boolean, bigint, text[], text, boolean, interval),
    retention.lower_floor(text, int, interval, text, text),
    retention.enable_policy(text), retention.disable_policy(text), retention.drop_policy(text),
    retention.link_windows(text, text, interval),
    retention.place_hold(regclass, text, text, text, boolean), retention.lift_hold(bigint, text, text),
    retention.classify(regclass, text, text), retention.prune(text, jsonb),
    retention.prune_archived(text, int),
    retention.candidates(text, int),
    retention.register_consumer(text, text, interval, regrole), retention.unregister_consumer(text, text),
    retention.preview(text), retention.preview_partitions(text),
    retention.replay_floor(text), retention.check_replay(text, timestamptz),
    retention._run_order(text), retention._lock_key(bigint),
    retention._run_begin(bigint), retention._run_advance(bigint), retention._run_progress(bigint),
    retention._run_end(bigint)
    TO retention_admin;
GRANT EXECUTE ON PROCEDURE retention.run(text) TO retention_admin;
GRANT EXECUTE ON FUNCTION retention.report_position(text, text, bigint, text),
    retention.consumer_status(text, text)
    TO retention_admin, retention_consumer;
GRANT EXECUTE ON FUNCTION retention.wake(), retention.health(), retention.keep_up(interval)
    TO retention_admin;
GRANT EXECUTE ON FUNCTION retention.claim_batch(text, int, interval, text), retention.claim_slice(text, int, interval, text, boolean),
    retention.claim_next(text, int, interval, text, boolean), retention.claimed_slice(uuid),
    retention.batch_manifest(uuid, boolean),
    retention.batch_frames(uuid), retention.batch_slice(uuid), retention.extend_lease(uuid, interval), retention.release_batch(uuid, text, text),
    retention.complete_batch(uuid, text, text, bigint, bigint, text), retention.archive_policies(),
    retention.prune_archived(text, int),
    retention.expiry_candidates(), retention.archive_holds(bigint, bytea, text[]),
    retention.expire_prepare(uuid, text, interval, bigint[], bigint, bigint, text, text),
    retention.expire_state(uuid), retention.expire_record(uuid, text, text[], jsonb, text),
    retention.archive_object_refs(), retention.ledger_orphan_objects(bigint, bigint, text[], text),
    retention.health(),
    retention.open_supersessions(int), retention.supersession_matches(bigint, bytea, text[]),
    retention.supersession_unaffected(bigint, text),
    retention.supersession_rewritten(bigint, text, text, text, bigint, bigint, text),
    retention.supersession_done(bigint, text), retention.archive_object_state(text),
    retention.archive_namespace(), retention.record_archive_verification(bigint, bigint, bigint, bigint)
    TO retention_archiver;
-- The database workers, when pg_retention.role names a member of retention_worker rather than
-- a superuser: their own steps and state, nothing else (a policy still runs as its owner).
GRANT EXECUTE ON FUNCTION retention._run_order(text), retention._lock_key(bigint),
    retention._worker_visit(),
    retention._worker_set(text, text), retention._worker_pause(text, text),
    retention._worker_visit_end(text, bigint[], float8), retention._worker_cycle_cap(bigint, text[]),
    retention._scrub_due(), retention._scrub_check(bigint, boolean)
    TO retention_worker;
-- Monitoring: retention.metrics() for pg_monitor (its members: postgres_exporter, sql_exporter),
-- retention_admin and the archiver (its /metrics).
GRANT EXECUTE ON FUNCTION retention.metrics() TO pg_monitor, retention_admin, retention_archiver;
-- Erasure outranks holds, so it has its own role (not granted to retention_admin).
GRANT EXECUTE ON FUNCTION retention.erase(regclass, text, text, text) TO retention_eraser;
GRANT EXECUTE ON PROCEDURE retention.erase_in_batches(regclass, text, text, text, int, bigint)
    TO retention_eraser;
-- One scrape of the archiver shows the whole system.
GRANT SELECT ON retention.stats TO retention_archiver;
-- The guard trigger needs no grant: PostgreSQL checks EXECUTE on a trigger function when the
-- trigger is made (by the extension's owner, guard.rs), not when it fires; it is SECURITY
-- DEFINER, and reads the catalog as the extension's owner.
-- What the statements that run as a policy's owner call (see pg_retention/src/author.rs).
GRANT EXECUTE ON FUNCTION retention._hold_count(oid), retention._hold_matches(bigint, anyelement),
    retention._consumer_pins(bigint), retention._consumer_positions(bigint), retention._live_batches(oid),
    retention._batch_quota(bigint, bigint, tid), retention._batch_bound(bigint, text)
    TO retention_admin;
-- An erasure's delete runs as its caller and counts the erased rows each active hold matches
-- (each evaluated as its placer): the hold collision.
GRANT EXECUTE ON FUNCTION retention._hold_matches(bigint, anyelement) TO retention_eraser;
