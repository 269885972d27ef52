-- pg_retention SQL surface: policies. Thin wrappers over the Rust internals (the `_`
-- functions) that define, alter, lower the floors of, enable, disable and drop a policy, link
-- windows, prune listed candidates and classify tables; and the predicate check they share with
-- holds. The SQL surface is the files of sql/api/, one per concern (pg_retention/src/lib.rs
-- orders them); what holds for all of them:
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

-- Deletes those of `keys` (as retention.candidates lists them) that are still eligible, in the
-- caller's transaction (engine/candidates.rs).
CREATE FUNCTION retention.prune(policy text, keys jsonb) RETURNS bigint
LANGUAGE sql
AS $fn$ SELECT retention._prune(policy, keys) $fn$;

-- Declares what a table's rows are for retention (api/class.rs).
CREATE FUNCTION retention.classify(relation regclass, class text, reason text) RETURNS void
LANGUAGE sql
AS $fn$ SELECT retention._classify(relation::oid, class, reason) $fn$;
