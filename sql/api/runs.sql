-- pg_retention SQL surface: runs and the background worker. The order a run takes policies in,
-- the run procedure (which COMMITs between steps, so it is PL/pgSQL), the worker's state and
-- steps, and wake().

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
