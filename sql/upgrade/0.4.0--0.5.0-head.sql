-- pg_retention 0.4.0 -> 0.5.0 (ALTER EXTENSION pg_retention UPDATE TO '0.5.0').
--
-- 0.5.0 adds pull consumers that pin a delete policy's stream (retention.register_consumer,
-- report_position, unregister_consumer, consumer_status; the retention.consumers view), the
-- retention_consumer role, and preview's pinned column; and archives that expire under the
-- same governance: archive_keep on policies (policy_versions.archive_keep), the archive
-- expirations index (retention.archive_expirations, retention.archives.expired_at), the
-- functions the archiver's `expire` calls and their operations' state
-- (retention.expire_operations); the kinds `unreferenced` and `orphan` (with
-- lease_table, lease_key, lease_expiry); and paced sweeps (pg_retention.max_replica_lag,
-- max_wal_rate: retention.wal_budget, worker_state.paused_since and pause_reason, the
-- ledger's pause entries in retention.stats); erasure (retention.erase, erase_in_batches, the
-- retention_eraser role, the retention.erasures view) and archive supersession
-- (retention.supersessions, the functions the archiver calls, retention.archives' current
-- object columns); whole leaves retired in two transactions (retention.retiring_leaves); and
-- each database's archive namespace in shared stores (retention.archive_namespace).
-- No existing row changes. As before,
-- every view and function goes and is defined again below exactly as a fresh install defines
-- it (scripts/assemble-upgrade), so an upgraded schema equals a fresh one (tests/tests/upgrade/).
\echo Use "ALTER EXTENSION pg_retention UPDATE TO '0.5.0'" to load this file. \quit

DO $roles$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'retention_consumer') THEN
        CREATE ROLE retention_consumer NOLOGIN;
    END IF;
END
$roles$;
GRANT USAGE ON SCHEMA retention TO retention_consumer;

CREATE TABLE retention.consumer_registrations (
    policy_id     bigint NOT NULL REFERENCES retention.policy_ids (id),
    consumer      text NOT NULL CHECK (consumer <> ''),
    epoch         bigint NOT NULL,
    position      text,
    lease         interval NOT NULL CHECK (lease > interval '0'),
    expires_at    timestamptz NOT NULL,
    registered_at timestamptz NOT NULL DEFAULT now(),
    registered_by regrole NOT NULL,
    -- The role whose members may report positions and read the status: the consumer's own.
    reporter      regrole NOT NULL,
    reported_at   timestamptz,
    PRIMARY KEY (policy_id, consumer)
);
CREATE SEQUENCE retention.consumer_epochs;
SELECT pg_catalog.pg_extension_config_dump('retention.consumer_registrations', '');
SELECT pg_catalog.pg_extension_config_dump('retention.consumer_epochs', '');

ALTER TABLE retention.policy_versions ADD COLUMN archive_keep interval,
    ADD COLUMN lease_table regclass, ADD COLUMN lease_key text[], ADD COLUMN lease_expiry text;
ALTER TABLE retention.policy_versions DROP CONSTRAINT policy_versions_kind_check,
    ADD CONSTRAINT policy_versions_kind_check
        CHECK (kind IN ('age', 'keep_latest', 'versions', 'entity', 'unreferenced', 'orphan'));

CREATE TABLE retention.archive_expirations (
    archive_id   bigint PRIMARY KEY REFERENCES retention.archive_records (id),
    operation_id uuid NOT NULL,
    expired_at   timestamptz NOT NULL DEFAULT now()
);
CREATE TRIGGER append_only BEFORE UPDATE OR DELETE ON retention.archive_expirations
    FOR EACH ROW EXECUTE FUNCTION retention._refuse_change();
CREATE TRIGGER append_only_truncate BEFORE TRUNCATE ON retention.archive_expirations
    FOR EACH STATEMENT EXECUTE FUNCTION retention._refuse_change();
SELECT pg_catalog.pg_extension_config_dump('retention.archive_expirations', '');

-- The archiver's expire operations, where each stands (sql/archive.sql); new in 0.5.0 with the
-- functions that write it, so there is nothing to carry over.
CREATE TABLE retention.expire_operations (
    operation    uuid PRIMARY KEY,
    prepared_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    prepared_by  text NOT NULL CHECK (prepared_by <> ''),
    plan_sha256  text NOT NULL CHECK (plan_sha256 ~ '^[0-9a-f]{64}$'),
    quiescence   interval NOT NULL CHECK (quiescence >= interval '0'),
    archive_ids  bigint[] NOT NULL CHECK (cardinality(archive_ids) > 0),
    objects      bigint NOT NULL,
    bytes        bigint NOT NULL,
    tombstone    text NOT NULL,
    state        text NOT NULL DEFAULT 'prepared'
                 CHECK (state IN ('prepared', 'partial', 'refused', 'completed')),
    applies      bigint NOT NULL DEFAULT 0,
    deleted_keys text[] NOT NULL DEFAULT '{}',
    last_outcome text CHECK (last_outcome IN ('completed', 'partial', 'refused', 'not_ready')),
    updated_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    CHECK ((applies = 0) = (last_outcome IS NULL))
);
SELECT pg_catalog.pg_extension_config_dump('retention.expire_operations', '');

ALTER TABLE retention.worker_state ADD COLUMN paused_since timestamptz, ADD COLUMN pause_reason text,
    ADD COLUMN last_visit_end timestamptz, ADD COLUMN cycle_resume bigint[];
CREATE INDEX ledger_entries_expire_operation ON retention.ledger_entries ((detail->>'operation'))
    WHERE method IN ('expire_prepare', 'expire_apply');
CREATE TABLE retention.wal_budget (
    database    name PRIMARY KEY,
    tokens      double precision NOT NULL,
    refilled_at timestamptz NOT NULL
);

DO $eraser$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'retention_eraser') THEN
        CREATE ROLE retention_eraser NOLOGIN;
    END IF;
    -- The database workers may connect as a member of this role (pg_retention.role) instead of
    -- a superuser: it may call the worker's own steps and nothing else.
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'retention_worker') THEN
        CREATE ROLE retention_worker NOLOGIN;
    END IF;
END
$eraser$;
GRANT USAGE ON SCHEMA retention TO retention_eraser;
GRANT USAGE ON SCHEMA retention TO retention_worker;
GRANT USAGE ON SCHEMA retention TO pg_monitor;
CREATE INDEX ledger_entries_erasure_request ON retention.ledger_entries ((detail->>'request_ref'))
    WHERE method IN ('erasure', 'hold_collision', 'supersede');
CREATE TABLE retention.supersessions (
    id            bigserial PRIMARY KEY,
    archive_id    bigint NOT NULL REFERENCES retention.archive_records (id),
    request_ref   text NOT NULL,
    relation      regclass NOT NULL,
    relation_name text NOT NULL,
    predicate     text NOT NULL,
    author        regrole NOT NULL,
    requested_at  timestamptz NOT NULL DEFAULT now(),
    state         text NOT NULL DEFAULT 'pending'
                  CHECK (state IN ('pending', 'unaffected', 'rewritten', 'done')),
    replaced_key  text,
    object_key    text,
    blake3        text,
    rows          bigint,
    bytes         bigint,
    erased        bigint,
    supersedes    text,
    rewritten_at  timestamptz,
    finished_at   timestamptz,
    reason        text,
    UNIQUE (archive_id, request_ref, predicate),
    CHECK (state IN ('pending', 'unaffected') OR (object_key IS NOT NULL AND replaced_key IS NOT NULL
           AND blake3 IS NOT NULL AND rows IS NOT NULL AND bytes IS NOT NULL AND supersedes IS NOT NULL))
);
CREATE INDEX supersessions_open ON retention.supersessions (archive_id, id)
    WHERE state IN ('pending', 'rewritten');
CREATE INDEX supersessions_request ON retention.supersessions (request_ref);
SELECT pg_catalog.pg_extension_config_dump('retention.supersessions', '');
SELECT pg_catalog.pg_extension_config_dump('retention.supersessions_id_seq', '');

DROP VIEW retention.workers, retention.stats, retention.ledger, retention.holds,
    retention.policy_history, retention.policies, retention.archives, retention.tables;

-- Only the trigger functions stay (triggers on the catalog and, for _fixpoint_guard, on
-- governed tables depend on them) and are replaced in place.
DO $drop$
DECLARE
    f record;
BEGIN
    FOR f IN SELECT p.oid::regprocedure AS sig, p.prokind FROM pg_catalog.pg_proc p
              WHERE p.pronamespace = 'retention'::regnamespace
                AND p.proname NOT IN ('_refuse_change', '_fixpoint_guard', '_count_ledger_entries')
    LOOP
        EXECUTE format('DROP %s %s', CASE f.prokind WHEN 'p' THEN 'PROCEDURE' ELSE 'FUNCTION' END, f.sig);
    END LOOP;
END
$drop$;

-- The search_path a delete policy's deletes run with (engine/trigger_path.rs).
ALTER TABLE retention.policy_versions ADD COLUMN search_path text[];
-- Clocks other than a column (engine/clock.rs).
ALTER TABLE retention.policy_versions ADD COLUMN age_expression text, ADD COLUMN age_table regclass,
    ADD COLUMN age_table_column text,
    ADD COLUMN age_pick text CHECK (age_pick IN ('newest', 'oldest')),
    ADD COLUMN terminal_table regclass, ADD COLUMN terminal_table_where text,
    ADD COLUMN terminal_table_test text CHECK (terminal_table_test IN ('exists', 'not_exists')),
    ADD COLUMN visible_rows_only boolean,
    ADD COLUMN max_table_rows bigint CHECK (max_table_rows > 0),
    ADD COLUMN mutable_columns text[], ADD COLUMN mutable_guard text,
    ADD COLUMN record_keys boolean;
-- Archive-and-keep policies and the two-window form (archive/deferred.rs): the action
-- 'archive', delete_after, batches archived with their rows kept, and those rows' keys.
ALTER TABLE retention.policy_versions ADD COLUMN delete_after interval,
    DROP CONSTRAINT policy_versions_action_check,
    ADD CONSTRAINT policy_versions_action_check
        CHECK (action IN ('delete', 'archive_then_delete', 'archive'));
ALTER TABLE retention.batches DROP CONSTRAINT batches_state_check,
    ADD CONSTRAINT batches_state_check
        CHECK (state IN ('claimed', 'pruned', 'released', 'expired', 'archived'));
CREATE TABLE retention.archived_rows (
    policy_id bigint NOT NULL REFERENCES retention.policy_ids (id),
    key       text[] NOT NULL,
    batch_id  uuid NOT NULL REFERENCES retention.batches (id),
    owner     regrole NOT NULL,
    PRIMARY KEY (policy_id, key)
);
CREATE INDEX archived_rows_batch ON retention.archived_rows (batch_id);
ALTER TABLE retention.archived_rows ENABLE ROW LEVEL SECURITY;
CREATE POLICY owner_reads ON retention.archived_rows FOR SELECT
    USING (owner = current_user::text::regrole);
GRANT SELECT ON retention.archived_rows TO retention_admin;
SELECT pg_catalog.pg_extension_config_dump('retention.archived_rows', '');
ALTER TABLE retention.hold_records ADD COLUMN enforced boolean NOT NULL DEFAULT false;
ALTER TABLE retention.ledger_entries ADD CONSTRAINT ledger_entries_method CHECK (method IN (
        'prune', 'hold_skip', 'cap_reached', 'error', 'run', 'hold_place', 'hold_lift',
        'claim', 'archive', 'resume', 'release', 'lease_expired', 'lower_floor', 'drop_partition',
        'drop_skipped', 'orphan_sweep', 'consumer_register', 'consumer_unregister',
        'erasure', 'hold_collision', 'supersede', 'pause', 'reference_skip',
        'erasure_scrub', 'skip_locked', 'worker_crash', 'cycle_cap', 'expire_prepare',
        'expire_apply', 'orphan_object_sweep'));
-- What each table's rows are for retention (catalog/class.rs): appended by
-- retention.classify, never changed; a table's newest record is its class.
CREATE TABLE retention.table_classes (
    id            bigserial PRIMARY KEY,
    relation      regclass NOT NULL,
    relation_name text NOT NULL,
    class         text NOT NULL CHECK (class IN ('source_of_truth', 'derived_rebuildable',
                                                 'operational_state', 'transport', 'audit')),
    reason        text NOT NULL,
    classified_by regrole NOT NULL,
    classified_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ON retention.table_classes (relation, id);
CREATE TRIGGER append_only BEFORE UPDATE OR DELETE ON retention.table_classes
    FOR EACH ROW EXECUTE FUNCTION retention._refuse_change();
CREATE TRIGGER append_only_truncate BEFORE TRUNCATE ON retention.table_classes
    FOR EACH STATEMENT EXECUTE FUNCTION retention._refuse_change();
SELECT pg_catalog.pg_extension_config_dump('retention.table_classes', '');
SELECT pg_catalog.pg_extension_config_dump('retention.table_classes_id_seq', '');


-- What retention.metrics() reports of each policy's table, kept between scrapes.
CREATE TABLE retention.policy_gauges (
    policy_id        bigint PRIMARY KEY,
    oldest_candidate timestamptz,
    eligible_rows    bigint,
    measured_at      timestamptz NOT NULL
);

-- The ledger's running totals (retention.policy_counters): the entries written before 0.5.0
-- are counted once, in order, by the function the trigger calls for every new one.
CREATE TABLE retention.policy_counters (
    policy_id          bigint PRIMARY KEY,
    rows_deleted       bigint NOT NULL DEFAULT 0,
    batches            bigint NOT NULL DEFAULT 0,
    rows_archived      bigint NOT NULL DEFAULT 0,
    bytes_archived     bigint NOT NULL DEFAULT 0,
    archives           bigint NOT NULL DEFAULT 0,
    hold_skips         bigint NOT NULL DEFAULT 0,
    reference_skips    bigint NOT NULL DEFAULT 0,
    cap_hits           bigint NOT NULL DEFAULT 0,
    partitions_dropped bigint NOT NULL DEFAULT 0,
    skipped_locked     bigint NOT NULL DEFAULT 0,
    pauses             bigint NOT NULL DEFAULT 0,
    paused_seconds     float8 NOT NULL DEFAULT 0,
    errors             jsonb NOT NULL DEFAULT '{}',
    last_run_at        timestamptz,
    last_outcome       text,
    last_success_at    timestamptz,
    last_archive_at    timestamptz,
    last_error_at      timestamptz,
    last_error         text,
    backlog            bigint
);

-- Leaves a sweep detached to retire whole and has not dropped yet (engine/retire.rs): written
-- in the transaction that detaches the leaf, deleted in the one that drops it, which follows
-- at once while the sweep holds a session lock on the leaf. A row left behind is a leaf whose
-- run was interrupted in between: the policy's next run attaches it again. State, not history,
-- and not dumped (its oids would not survive a restore).
CREATE TABLE retention.retiring_leaves (
    leaf        oid PRIMARY KEY,
    policy_id   bigint NOT NULL,
    owner       oid NOT NULL,
    run_id      uuid NOT NULL,
    parent      oid NOT NULL,
    qualified   text NOT NULL,
    bound       text NOT NULL,
    rows        bigint NOT NULL,
    proof       text NOT NULL,
    hold_ids    bigint[] NOT NULL DEFAULT '{}',
    hold_seen   bigint NOT NULL,
    detached_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- Erasures still to reach the disk (engine/scrub.rs): one row per table (leaf) an erasure
-- deleted rows from. A deleted row version stays in the table's pages, readable by tools that
-- read pages, until VACUUM removes it; the database worker checks each row's table for dead
-- versions older than `horizon` (the first transaction id after the erasure committed, taken
-- when the worker first sees it), runs VACUUM (INDEX_CLEANUP ON) when some are left and
-- removable, and stamps `unreadable_at` when none is left (a table not stored by the heap
-- access method cannot be checked: `unverifiable`). State, not history (the ledger's
-- `erasure_scrub` entries are the history), and not dumped: a restored table holds only live
-- rows, and its oids would not survive a restore.
CREATE TABLE retention.erasure_scrubs (
    id              bigserial PRIMARY KEY,
    request_ref     text NOT NULL,
    relation        oid NOT NULL,
    relation_name   text NOT NULL,
    erased          bigint NOT NULL,
    requested_at    timestamptz NOT NULL DEFAULT now(),
    horizon         xid8,
    checks          integer NOT NULL DEFAULT 0,
    vacuums         integer NOT NULL DEFAULT 0,
    checked_at      timestamptz,
    left_versions   bigint,
    status          text NOT NULL DEFAULT 'pending'
                    CHECK (status IN ('pending', 'waiting', 'left', 'unreadable', 'dropped', 'unverifiable')),
    unreadable_at   timestamptz,
    UNIQUE (request_ref, relation),
    CHECK ((status IN ('unreadable', 'dropped')) = (unreadable_at IS NOT NULL))
);
CREATE INDEX erasure_scrubs_open ON retention.erasure_scrubs (id) WHERE unreadable_at IS NULL;

-- This database's archive namespace: the first segment of every object key it writes, so
-- databases sharing an object store never touch each other's objects (docs/archiver.md). One
-- row, written on first use (derived: `<system identifier>.<database>`) or by the operator
-- (retention.set_archive_namespace), and the result of the archiver's last `verify --all`
-- (retention._missing_archives). Not dumped: a restored database derives its own namespace
-- (its cluster's), and its recorded archives keep their keys.
CREATE TABLE retention.archive_namespace (
    singleton             boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    namespace             text NOT NULL CHECK (namespace ~ '^[A-Za-z0-9][A-Za-z0-9_.-]{0,199}$'),
    source                text NOT NULL CHECK (source IN ('derived', 'operator')),
    recorded_at           timestamptz NOT NULL DEFAULT now(),
    verified_at           timestamptz,
    verified_checked      bigint,
    verified_missing      bigint,
    verified_failed       bigint,
    verified_unreferenced bigint
);
