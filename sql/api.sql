-- pg_retention public SQL surface. Thin wrappers over the Rust internals (the `_` functions),
-- plus the parts that are plain SQL: raising typed errors, run ordering, the run procedure,
-- the replay boundary. Runs last in the extension script (finalize).

-- Unwraps a result from a Rust internal: returns its value, or raises its error with the
-- SQLSTATE, message, detail and hint it carries. Errors are raised here, in plpgsql, because
-- pgrx re-raises errors of our own SQLSTATE class (RT) as XX000 when they cross Rust code.
CREATE FUNCTION retention._result(r jsonb) RETURNS jsonb
LANGUAGE plpgsql SET search_path = pg_catalog AS $fn$
DECLARE
    e jsonb := r->'error';
    code text := e->>'code';
    msg text := e->>'message';
    detail text := e->>'detail';
    hint text := e->>'hint';
BEGIN
    IF e IS NULL THEN
        RETURN r->'ok';
    ELSIF detail IS NULL AND hint IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = code, MESSAGE = msg;
    ELSIF detail IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = code, MESSAGE = msg, HINT = hint;
    ELSIF hint IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = code, MESSAGE = msg, DETAIL = detail;
    ELSE
        RAISE EXCEPTION USING ERRCODE = code, MESSAGE = msg, DETAIL = detail, HINT = hint;
    END IF;
END
$fn$;

-- Why a predicate is unacceptable for a table (NULL when it is fine). Parse and analysis
-- errors are caught here, in a subtransaction, and returned as their message.
CREATE FUNCTION retention._predicate_check(rel oid, predicate text) RETURNS text
LANGUAGE plpgsql SET search_path = pg_catalog, public, pg_temp AS $fn$
BEGIN
    RETURN retention._predicate_problem(rel, predicate);
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
    max_rows_per_run bigint DEFAULT 1000000
) RETURNS bigint
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $fn$
    SELECT retention._result(retention._define_policy('add', jsonb_build_object(
        'name', name, 'relation', relation::oid::bigint, 'kind', kind, 'age_column', age_column,
        'older_than', older_than::text, 'scope', scope, 'terminal', terminal, 'group_by', group_by,
        'order_by', order_by, 'keep', keep, 'min_keep', min_keep, 'action', action,
        'batch_size', batch_size, 'max_rows_per_run', max_rows_per_run)))::bigint;
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
    max_rows_per_run bigint DEFAULT NULL
) RETURNS bigint
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $fn$
    SELECT retention._result(retention._define_policy('alter', jsonb_build_object(
        'name', name, 'kind', kind, 'age_column', age_column, 'older_than', older_than::text,
        'scope', scope, 'terminal', terminal, 'group_by', group_by, 'order_by', order_by,
        'keep', keep, 'min_keep', min_keep, 'action', action, 'batch_size', batch_size,
        'max_rows_per_run', max_rows_per_run)))::bigint;
$fn$;

CREATE FUNCTION retention.enable_policy(name text) RETURNS bigint
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp
AS $fn$ SELECT retention._set_policy_state(name, 'enable') $fn$;

CREATE FUNCTION retention.disable_policy(name text) RETURNS bigint
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp
AS $fn$ SELECT retention._set_policy_state(name, 'disable') $fn$;

CREATE FUNCTION retention.drop_policy(name text) RETURNS bigint
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp
AS $fn$ SELECT retention._set_policy_state(name, 'drop') $fn$;

CREATE FUNCTION retention.link_windows(producer text, consumer text, margin interval) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp
AS $fn$ SELECT retention._result(retention._link_windows(producer, consumer, margin::text)) $fn$;

CREATE FUNCTION retention.place_hold(relation regclass, predicate text, reason text, actor text)
RETURNS bigint
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp
AS $fn$ SELECT retention._result(retention._place_hold(relation::oid, predicate, reason, actor))::bigint $fn$;

CREATE FUNCTION retention.lift_hold(hold_id bigint, actor text, reason text) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp
AS $fn$ SELECT retention._result(retention._lift_hold(hold_id, actor, reason)) $fn$;

-- The oldest instant still inside a policy's window: replays from before it may find rows gone.
CREATE FUNCTION retention.replay_floor(policy text) RETURNS timestamptz
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $fn$
DECLARE
    w interval;
BEGIN
    SELECT p.older_than INTO w FROM retention.policies p WHERE p.name = replay_floor.policy;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'policy % does not exist', replay_floor.policy
            USING ERRCODE = '42704', HINT = 'See retention.policies.';
    END IF;
    IF w IS NULL THEN
        RAISE EXCEPTION 'policy % has no time window', replay_floor.policy
            USING ERRCODE = '22023', DETAIL = 'Only policies with older_than have a replay boundary.',
                  HINT = 'Give the policy an older_than, or replay without a boundary check.';
    END IF;
    RETURN now() - w;
END
$fn$;

-- Refuses a replay from before the boundary with RT301, naming the boundary.
CREATE FUNCTION retention.check_replay(policy text, from_ts timestamptz) RETURNS timestamptz
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $fn$
DECLARE
    floor_ts timestamptz := retention.replay_floor(check_replay.policy);
BEGIN
    IF from_ts < floor_ts THEN
        RAISE EXCEPTION 'replay from % is older than the retention boundary % of policy %',
                from_ts, floor_ts, check_replay.policy
            USING ERRCODE = 'RT301',
                  DETAIL = format('Rows older than %s may already have been pruned.', floor_ts),
                  HINT = format('Replay from %s or later.', floor_ts);
    END IF;
    RETURN floor_ts;
END
$fn$;

-- Policies in the order a run takes them: enabled delete-action policies, children before
-- parents (a table that references another is swept first), then by name.
CREATE FUNCTION retention._run_order(policy text) RETURNS TABLE (id bigint, name text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $fn$
    WITH RECURSIVE pol AS (
        SELECT p.id, p.name, p.relation::oid AS rel FROM retention.policies p
         WHERE p.enabled AND p.action = 'delete' AND (_run_order.policy IS NULL OR p.name = _run_order.policy)
    ), up(rel, depth) AS (
        SELECT rel, 0 FROM pol
        UNION ALL
        SELECT c.confrelid, up.depth + 1
          FROM up JOIN pg_constraint c ON c.contype = 'f' AND c.conrelid = up.rel AND c.confrelid <> c.conrelid
         WHERE up.depth < 32
    )
    SELECT pol.id, pol.name FROM pol
      LEFT JOIN (SELECT up.rel, max(up.depth) AS depth FROM up GROUP BY up.rel) d ON d.rel = pol.rel
     ORDER BY coalesce(d.depth, 0), pol.name;
$fn$;

-- The advisory-lock key of a policy: one pruner per policy, manual runs and workers alike.
CREATE FUNCTION retention._lock_key(policy_id bigint) RETURNS bigint
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog
AS $fn$ SELECT (x'52544e00'::bigint << 32) | policy_id $fn$;

-- One batch, with its error captured and ledgered instead of aborting the run.
CREATE FUNCTION retention._sweep_batch_safe(state jsonb) RETURNS jsonb
LANGUAGE plpgsql SET search_path = pg_catalog, public, pg_temp AS $fn$
DECLARE
    msg text;
    code text;
BEGIN
    BEGIN
        RETURN retention._sweep_batch(state);
    EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS msg = MESSAGE_TEXT, code = RETURNED_SQLSTATE;
    END;
    RETURN retention._sweep_failed(state, msg, code);
END
$fn$;

-- Sweeps delete-action policies now (one, or all when policy is NULL), committing after every
-- batch. A policy whose lock is held by another pruner is skipped and that is ledgered.
CREATE PROCEDURE retention.run(policy text DEFAULT NULL)
LANGUAGE plpgsql AS $fn$
DECLARE
    p record;
    st jsonb;
    n int := 0;
BEGIN
    IF run.policy IS NOT NULL AND NOT EXISTS (SELECT 1 FROM retention.policies x WHERE x.name = run.policy) THEN
        RAISE EXCEPTION 'policy % does not exist', run.policy USING ERRCODE = '42704', HINT = 'See retention.policies.';
    END IF;
    FOR p IN SELECT * FROM retention._run_order(run.policy) LOOP
        n := n + 1;
        IF NOT pg_catalog.pg_try_advisory_lock(retention._lock_key(p.id)) THEN
            PERFORM retention._ledger_skip_locked(p.id, current_user::text);
            RAISE NOTICE 'policy %: skipped, another pruner holds its lock', p.name;
            COMMIT;
            CONTINUE;
        END IF;
        st := retention._sweep_start(p.id, current_user::text, NULL);
        COMMIT;
        WHILE NOT (st->>'done')::boolean LOOP
            st := retention._sweep_batch_safe(st);
            COMMIT;
        END LOOP;
        st := retention._sweep_finish(st);
        COMMIT;
        PERFORM pg_catalog.pg_advisory_unlock(retention._lock_key(p.id));
        RAISE NOTICE 'policy %: % (% rows deleted in % batches)%', p.name, st->>'outcome',
            st->>'deleted', st->>'batches', coalesce(': ' || (st->>'reason'), '');
    END LOOP;
    IF n = 0 THEN
        RAISE NOTICE 'no enabled delete-action policy to run';
    END IF;
END
$fn$;

-- Ledgers that a run skipped a policy because another pruner holds its lock.
CREATE FUNCTION retention._ledger_skip_locked(policy_id bigint, actor text) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $fn$
    INSERT INTO retention.ledger_entries (method, policy, policy_id, policy_version, relation, rows, actor, detail)
    SELECT 'skip_locked', p.name, p.id, p.version, p.relation::text, 0, _ledger_skip_locked.actor,
           jsonb_build_object('reason', 'another pruner holds the policy lock')
      FROM retention.policies p WHERE p.id = _ledger_skip_locked.policy_id;
$fn$;

-- Privileges: nothing to PUBLIC; administrators get the public surface; the internals stay
-- with the owner except the sweep steps, which run() (SECURITY INVOKER, it commits) calls.
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA retention FROM PUBLIC;
REVOKE ALL ON ALL PROCEDURES IN SCHEMA retention FROM PUBLIC;
GRANT EXECUTE ON FUNCTION retention.version() TO PUBLIC;
GRANT EXECUTE ON FUNCTION
    retention.add_policy(text, regclass, text, text, interval, text, text, text[], text, int, int, text, int, bigint),
    retention.alter_policy(text, text, text, interval, text, text, text[], text, int, int, text, int, bigint),
    retention.enable_policy(text), retention.disable_policy(text), retention.drop_policy(text),
    retention.link_windows(text, text, interval),
    retention.place_hold(regclass, text, text, text), retention.lift_hold(bigint, text, text),
    retention.preview(text), retention.replay_floor(text), retention.check_replay(text, timestamptz),
    retention._run_order(text), retention._lock_key(bigint), retention._sweep_start(bigint, text, bigint),
    retention._sweep_batch_safe(jsonb), retention._sweep_batch(jsonb), retention._sweep_failed(jsonb, text, text),
    retention._sweep_finish(jsonb), retention._ledger_skip_locked(bigint, text)
    TO retention_admin;
GRANT EXECUTE ON PROCEDURE retention.run(text) TO retention_admin;
