-- pg_retention 0.4.0 -> 0.5.0 (ALTER EXTENSION pg_retention UPDATE TO '0.5.0').
--
-- 0.5.0 adds pull consumers that pin a delete policy's stream (retention.register_consumer,
-- report_position, unregister_consumer, consumer_status; the retention.consumers view), the
-- retention_consumer role, and preview's pinned column; and archives that expire under the
-- same governance: archive_keep on policies (policy_versions.archive_keep), the archive
-- expirations index (retention.archive_expirations, retention.archives.expired_at) and the
-- functions the archiver's `expire` calls; the kinds `unreferenced` and `orphan` (with
-- lease_table, lease_key, lease_expiry); and paced sweeps (pg_retention.max_replica_lag,
-- max_wal_rate: retention.wal_budget, worker_state.paused_since and pause_reason, the
-- ledger's pause entries in retention.stats); erasure (retention.erase, erase_in_batches, the
-- retention_eraser role, the retention.erasures view) and archive supersession
-- (retention.supersessions, the functions the archiver calls, retention.archives' current
-- object columns); whole leaves retired in two transactions (retention.retiring_leaves); and
-- each database's archive namespace in shared stores (retention.archive_namespace).
-- No existing row changes. As before,
-- every view and function goes and is defined again below exactly as a fresh install defines
-- it (scripts/assemble-upgrade), so an upgraded schema equals a fresh one (tests/tests/upgrade.rs).
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
    ADD COLUMN age_pick text CHECK (age_pick IN ('newest', 'oldest'));

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

/*
This file is auto generated by pgrx.

The ordering of items is not stable, it is driven by a dependency graph.
*/

-- pg_retention/src/lib.rs:32
-- bootstrap
-- pg_retention bootstrap: runs first in the extension script.
-- The schema `retention` is created by CREATE EXTENSION from the control file (schema = retention);
-- everything the extension owns lives in it.
--
-- catalog.sql and archive.sql hold the tables (the state an upgrade changes in place); every
-- other file here only defines (views, functions, grants) and is re-run as it is by each
-- upgrade script (scripts/assemble-upgrade).
COMMENT ON SCHEMA retention IS 'pg_retention: policies, holds, ledger and sweeps';

-- Append-only enforcement: refuses UPDATE, DELETE and TRUNCATE, for the owner too (the triggers
-- are in catalog.sql and archive.sql).
CREATE OR REPLACE FUNCTION retention._refuse_change() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog AS $fn$
BEGIN
    RAISE EXCEPTION 'retention.% is append-only', TG_TABLE_NAME
        USING ERRCODE = 'RT401',
              DETAIL = format('%s on %I.%I was refused.', TG_OP, TG_TABLE_SCHEMA, TG_TABLE_NAME),
              HINT = 'Records of pg_retention are never changed or removed; append a new record instead (for holds: retention.lift_hold).';
END
$fn$;

-- pg_retention/src/lib.rs:38
-- requires:
--   catalog
--   archive

-- Read-only views over the catalog. Granted to retention_admin only.

CREATE VIEW retention.policies AS
SELECT p.id, p.name, v.version, v.relation::regclass AS relation, v.kind, v.age_column,
       v.older_than, v.scope, v.terminal, v.group_by, v.order_by, v.keep, v.min_keep, v.action,
       v.batch_size, v.max_rows_per_run, v.enabled, v.changed_by, v.changed_at,
       v.owner::regrole AS owner, v.keep_floor, v.window_floor, v.archive_keep, v.lease_table,
       v.lease_key, v.lease_expiry, v.search_path,
       v.age_expression, v.age_table, v.age_table_column, v.age_pick
FROM retention.policy_ids p
CROSS JOIN LATERAL (
    SELECT * FROM retention.policy_versions pv
    WHERE pv.policy_id = p.id ORDER BY pv.version DESC LIMIT 1
) v
WHERE p.dropped_at IS NULL;

CREATE VIEW retention.policy_history AS
SELECT p.id, p.name, v.version, v.change, v.relation_name AS relation, v.kind, v.age_column,
       v.older_than, v.scope, v.terminal, v.group_by, v.order_by, v.keep, v.min_keep, v.action,
       v.batch_size, v.max_rows_per_run, v.enabled, v.changed_by, v.changed_at,
       v.owner::regrole AS owner, v.keep_floor, v.window_floor, v.archive_keep, v.lease_table,
       v.lease_key, v.lease_expiry, v.search_path,
       v.age_expression, v.age_table, v.age_table_column, v.age_pick
FROM retention.policy_ids p
JOIN retention.policy_versions v ON v.policy_id = p.id;

CREATE VIEW retention.holds AS
SELECT h.id, h.relation_name AS relation, h.predicate, h.reason, h.actor, h.placed_at,
       h.placed_by::regrole AS placed_by, l.hold_id IS NULL AS active, l.lifted_at, l.actor AS lifted_by, l.reason AS lift_reason
FROM retention.hold_records h
LEFT JOIN retention.hold_lifts l ON l.hold_id = h.id;

-- rows_deleted: the rows an entry deleted (prune, orphan_sweep, drop_partition, erasure), 0 for
-- every other method, so that its sum over a policy or a table is exactly the rows deleted
-- (a run entry repeats the sum of its batches' rows; cap_reached and hold_skip count rows left).
CREATE VIEW retention.ledger AS
SELECT id, at, method, policy, policy_version, relation, rows, hold_ids, archive_id, actor,
       run_id, detail,
       CASE WHEN method IN ('prune', 'orphan_sweep', 'drop_partition', 'erasure') THEN rows ELSE 0 END
           AS rows_deleted
FROM retention.ledger_entries;

-- Per current policy, figures from the ledger's running totals (retention.policy_counters, kept
-- in the transaction of each entry), so they always add up with it and cost one row to read.
CREATE VIEW retention.stats AS
SELECT p.name AS policy,
       coalesce(c.rows_deleted, 0) AS rows_pruned_total,
       coalesce(c.batches, 0) AS batches_total,
       c.last_run_at,
       c.last_success_at,
       CASE WHEN c.last_error_at IS NOT NULL AND (c.last_success_at IS NULL OR c.last_error_at > c.last_success_at)
            THEN c.last_error END AS last_error,
       coalesce(c.skipped_locked, 0) AS skipped_locked,
       c.backlog,
       coalesce(c.partitions_dropped, 0) AS partitions_dropped_total,
       coalesce(c.pauses, 0) AS pauses_total,
       coalesce(c.paused_seconds, 0)::float8 AS paused_seconds_total,
       coalesce(c.rows_archived, 0) AS rows_archived_total,
       coalesce(c.bytes_archived, 0) AS bytes_archived_total,
       coalesce(c.hold_skips, 0) AS hold_skips_total,
       coalesce(c.reference_skips, 0) AS reference_skips,
       coalesce(c.cap_hits, 0) AS cap_hits_total,
       coalesce(c.errors, '{}') AS errors_total,
       c.last_archive_at
FROM retention.policies p
LEFT JOIN retention.policy_counters c ON c.policy_id = p.id;

-- One table, one class: each governed table, whether its rows leave through verified archives
-- (archive) or are deleted (delete), and the policies that govern it.
CREATE VIEW retention.tables AS
SELECT p.relation,
       CASE WHEN bool_or(p.action = 'archive_then_delete') THEN 'archive' ELSE 'delete' END AS class,
       array_agg(p.name ORDER BY p.name) AS policies
FROM retention.policies p
GROUP BY p.relation;

GRANT SELECT ON retention.policies, retention.policy_history, retention.holds, retention.ledger,
    retention.stats, retention.tables TO retention_admin;

-- Whether `pid` is a pg_retention worker: pg_stat_activity shows other roles' backend_type
-- only to members of pg_read_all_stats, so the view asks as the extension's owner.
CREATE OR REPLACE FUNCTION retention._is_worker(pid integer) RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
    SELECT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = $1 AND a.backend_type = 'pg_retention worker');
$fn$;
GRANT EXECUTE ON FUNCTION retention._is_worker(integer) TO retention_admin;

-- The worker visits to this database: the last or current one (running: a worker is visiting
-- now), the cycle (a cycle may take several visits: cycle_resume is what is left of it), when
-- the next visit is due, and since when the database waits for a free worker past that.
CREATE VIEW retention.workers AS
SELECT w.database, w.pid, w.state, w.current_policy, w.started_at, w.last_cycle_start,
       w.last_cycle_end, w.next_wake, w.paused_since, w.pause_reason, r.running,
       w.last_visit_end, w.cycle_resume,
       CASE WHEN NOT r.running AND w.next_wake < clock_timestamp() THEN w.next_wake END AS waiting_since
FROM retention.worker_state w,
     LATERAL (SELECT retention._is_worker(w.pid) AS running) r;
GRANT SELECT ON retention.workers TO retention_admin;

-- The archive index (archive.sql). object_key, blake3, rows and bytes are the archive's object
-- now: the newest rewrite of it when an erasure superseded the original (original_key).
CREATE VIEW retention.archives AS
SELECT a.id, a.batch, a.policy, a.policy_version, a.relation,
       coalesce(s.object_key, a.object_key) AS object_key, coalesce(s.blake3, a.blake3) AS blake3,
       coalesce(s.rows, a.rows) AS rows, coalesce(s.bytes, a.bytes) AS bytes,
       a.deleted, a.archived_at, x.expired_at, x.operation_id AS expired_by,
       a.object_key AS original_key, s.rewritten_at AS superseded_at, s.id AS supersession
FROM retention.archive_records a
LEFT JOIN LATERAL (SELECT s.id, s.object_key, s.blake3, s.rows, s.bytes, s.rewritten_at
                     FROM retention.supersessions s
                    WHERE s.archive_id = a.id AND s.state IN ('rewritten', 'done')
                    ORDER BY s.id DESC LIMIT 1) s ON true
LEFT JOIN retention.archive_expirations x ON x.archive_id = a.id;

GRANT SELECT ON retention.archives TO retention_admin, retention_archiver;

-- Erasure requests (retention.erase), by their reference: the rows erased in each table, the
-- archives whose slices were rewritten without the erased rows, and the supersessions still
-- pending (an archiver has not processed them yet).
CREATE VIEW retention.erasures AS
WITH t AS (
    SELECT l.detail->>'request_ref' AS request_ref, l.relation, sum(l.rows)::bigint AS rows,
           min(l.at) AS first_at, max(l.at) AS last_at
      FROM retention.ledger_entries l
     WHERE l.method = 'erasure'
     GROUP BY 1, 2),
e AS (
    SELECT t.request_ref, jsonb_object_agg(t.relation, t.rows) AS tables, sum(t.rows)::bigint AS rows_erased,
           min(t.first_at) AS requested_at, max(t.last_at) AS erased_at
      FROM t GROUP BY 1),
s AS (
    SELECT s.request_ref,
           count(*) FILTER (WHERE s.state = 'done') AS archives_superseded,
           coalesce(sum(s.erased) FILTER (WHERE s.state IN ('rewritten', 'done')), 0)::bigint AS archived_rows_erased,
           count(*) FILTER (WHERE s.state = 'unaffected') AS archives_unaffected,
           count(*) FILTER (WHERE s.state IN ('pending', 'rewritten')) AS pending
      FROM retention.supersessions s GROUP BY 1),
c AS (
    SELECT l.detail->>'request_ref' AS request_ref, array_agg(DISTINCT h.id ORDER BY h.id) AS held_by
      FROM retention.ledger_entries l CROSS JOIN LATERAL unnest(l.hold_ids) h(id)
     WHERE l.method = 'hold_collision'
     GROUP BY 1)
SELECT e.request_ref, e.tables, e.rows_erased,
       coalesce(s.archives_superseded, 0) AS archives_superseded,
       coalesce(s.archived_rows_erased, 0) AS archived_rows_erased,
       coalesce(s.archives_unaffected, 0) AS archives_unaffected,
       coalesce(s.pending, 0) AS pending,
       coalesce(c.held_by, '{}') AS hold_collisions,
       e.requested_at, e.erased_at
FROM e
LEFT JOIN s ON s.request_ref = e.request_ref
LEFT JOIN c ON c.request_ref = e.request_ref;

GRANT SELECT ON retention.erasures TO retention_admin, retention_eraser;

-- Registered pull consumers and what each pins: `pinning` while the lease is live; from
-- `position` on (every row while `position` is NULL, before the epoch's first report).
CREATE VIEW retention.consumers AS
SELECT p.name AS policy, c.consumer, c.epoch, c.position, c.lease, c.expires_at,
       c.expires_at > now() AS pinning, c.registered_at, c.registered_by::regrole AS registered_by,
       c.reporter::regrole AS reporter, c.reported_at
FROM retention.consumer_registrations c
JOIN retention.policy_ids p ON p.id = c.policy_id
WHERE p.dropped_at IS NULL;
GRANT SELECT ON retention.consumers TO retention_admin;

-- pg_retention/src/lib.rs:48
-- requires:
--   views

-- The ledger's one writer for SQL callers (Rust appends through pg_retention/src/catalog/ledger.rs,
-- the same columns). With policy_id, an entry about that policy carrying its current name,
-- version and table, written only while the policy is live; without, an entry naming
-- policy_name (NULL: no policy), for the worker's own events.
CREATE OR REPLACE FUNCTION retention._ledger_append(method text, actor text, detail jsonb, policy_id bigint,
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
CREATE OR REPLACE FUNCTION retention._error_reason(method text, detail jsonb) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $fn$
    SELECT CASE
        WHEN method = 'error' THEN CASE
            WHEN detail->>'sqlstate' = '42501' THEN 'privilege'
            WHEN detail->>'sqlstate' IN ('40001', '40P01', '55P03', '57014') THEN 'conflict'
            WHEN left(detail->>'sqlstate', 2) IN ('22', '23', '42') THEN 'invalid'
            ELSE 'other' END
        WHEN method = 'release' AND detail->>'reason' LIKE 'refused%' THEN 'archive_refused'
        WHEN method = 'release' AND detail->>'reason' LIKE 'archiver%' THEN 'archive_failed'
        WHEN method = 'lease_expired' THEN 'lease_expired'
    END
$fn$;

-- Whether an entry moves a counter below: one that counts nothing (a claim) must not lock the
-- policy's counter row, or the claims and prunes of one policy queue on it. (SQL without SET,
-- so it is inlined into its callers, which pin the search_path.)
CREATE OR REPLACE FUNCTION retention._counts(method text, archive_id bigint) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $fn$
    SELECT archive_id IS NOT NULL
        OR method IN ('prune', 'orphan_sweep', 'drop_partition', 'hold_skip', 'reference_skip', 'cap_reached',
                      'skip_locked', 'pause', 'run', 'error', 'release', 'lease_expired')
$fn$;

-- Adds `entries` to the counters of their policies. PL/pgSQL, not SQL: a SQL function's
-- statement is planned again at every call (about 2 ms here, once per sweep step), PL/pgSQL
-- keeps its plan for the session.
CREATE OR REPLACE FUNCTION retention._count_ledger(entries retention.ledger_entries[]) RETURNS void
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
CREATE OR REPLACE FUNCTION retention._count_ledger_entries() RETURNS trigger
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

-- pg_retention/src/archive/expiry.rs:63
-- pg_retention::archive::expiry::_archive_holds
CREATE OR REPLACE FUNCTION "_archive_holds"(
	"archive_id" bigint, /* i64 */
	"slice" bytea, /* & [u8] */
	"columns" TEXT[] /* Vec < Option < String > > */
) RETURNS jsonb /* pgrx :: JsonB */
STRICT SECURITY DEFINER
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', '_archive_holds_wrapper';

-- pg_retention/src/engine/quota.rs:68
-- pg_retention::engine::quota::_batch_bound
CREATE OR REPLACE FUNCTION "_batch_bound"(
	"token" bigint, /* Option < i64 > */
	"next" TEXT /* Option < & str > */
) RETURNS bool /* bool */
VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', '_batch_bound_wrapper';

-- pg_retention/src/api/archive.rs:126
-- pg_retention::api::archive::_batch_frames
CREATE OR REPLACE FUNCTION "_batch_frames"(
	"batch" TEXT /* & str */
) RETURNS TABLE (
	"error" jsonb,  /* Option < pgrx :: JsonB > */
	"frame" bytea  /* :: std :: option :: Option < Vec < u8 > > */
)
STRICT SECURITY DEFINER
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', '_batch_frames_wrapper';

-- pg_retention/src/api/archive.rs:116
-- pg_retention::api::archive::_batch_manifest
CREATE OR REPLACE FUNCTION "_batch_manifest"(
	"batch" TEXT, /* & str */
	"digest" bool /* bool */
) RETURNS jsonb /* pgrx :: JsonB */
STRICT SECURITY DEFINER
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', '_batch_manifest_wrapper';

-- pg_retention/src/engine/quota.rs:32
-- pg_retention::engine::quota::_batch_quota
CREATE OR REPLACE FUNCTION "_batch_quota"(
	"limit" bigint, /* i64 */
	"token" bigint, /* i64 */
	"row" tid /* pg_sys :: ItemPointerData */
) RETURNS bool /* bool */
STRICT VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', '_batch_quota_wrapper';

-- pg_retention/src/api/archive.rs:146
-- pg_retention::api::archive::_batch_slice
CREATE OR REPLACE FUNCTION "_batch_slice"(
	"batch" TEXT /* & str */
) RETURNS TABLE (
	"result" jsonb,  /* pgrx :: JsonB */
	"slice" bytea  /* :: std :: option :: Option < Vec < u8 > > */
)
STRICT SECURITY DEFINER
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', '_batch_slice_wrapper';

-- pg_retention/src/catalog/tree.rs:90
-- pg_retention::catalog::tree::_below
CREATE OR REPLACE FUNCTION "_below"(
	"relation" oid /* pg_sys :: Oid */
) RETURNS SETOF oid /* pg_sys :: Oid */
STRICT STABLE PARALLEL SAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', '_below_wrapper';

-- pg_retention/src/api/archive.rs:11
-- pg_retention::api::archive::_claim_batch
CREATE OR REPLACE FUNCTION "_claim_batch"(
	"policy" TEXT, /* Option < & str > */
	"max_rows" INT, /* Option < i32 > */
	"lease" TEXT, /* Option < & str > */
	"owner" TEXT /* Option < & str > */
) RETURNS jsonb /* pgrx :: JsonB */
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', '_claim_batch_wrapper';

-- pg_retention/src/api/archive.rs:79
-- pg_retention::api::archive::_claim_next
CREATE OR REPLACE FUNCTION "_claim_next"(
	"policy" TEXT, /* Option < & str > */
	"max_rows" INT, /* Option < i32 > */
	"lease" TEXT, /* Option < & str > */
	"owner" TEXT, /* Option < & str > */
	"resume" bool /* Option < bool > */
) RETURNS jsonb /* pgrx :: JsonB */
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', '_claim_next_wrapper';

-- pg_retention/src/api/archive.rs:49
-- pg_retention::api::archive::_claim_slice
CREATE OR REPLACE FUNCTION "_claim_slice"(
	"policy" TEXT, /* Option < & str > */
	"max_rows" INT, /* Option < i32 > */
	"lease" TEXT, /* Option < & str > */
	"owner" TEXT, /* Option < & str > */
	"resume" bool /* Option < bool > */
) RETURNS TABLE (
	"result" jsonb,  /* pgrx :: JsonB */
	"slice" bytea,  /* :: std :: option :: Option < Vec < u8 > > */
	"more" bool  /* bool */
)
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', '_claim_slice_wrapper';

-- pg_retention/src/api/archive.rs:175
-- pg_retention::api::archive::_complete_batch
CREATE OR REPLACE FUNCTION "_complete_batch"(
	"batch" TEXT, /* Option < & str > */
	"object_key" TEXT, /* Option < & str > */
	"blake3" TEXT, /* Option < & str > */
	"rows" bigint, /* Option < i64 > */
	"bytes" bigint, /* Option < i64 > */
	"owner" TEXT /* Option < & str > */
) RETURNS jsonb /* pgrx :: JsonB */
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', '_complete_batch_wrapper';

-- pg_retention/src/api/consumer.rs:313
-- pg_retention::api::consumer::_consumer_status
CREATE OR REPLACE FUNCTION "_consumer_status"(
	"policy" TEXT, /* & str */
	"consumer" TEXT /* & str */
) RETURNS jsonb /* pgrx :: JsonB */
STRICT
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', '_consumer_status_wrapper';

-- pg_retention/src/api/policy.rs:357
-- pg_retention::api::policy::_define_policy
CREATE OR REPLACE FUNCTION "_define_policy"(
	"change" TEXT, /* & str */
	"spec" jsonb /* pgrx :: JsonB */
) RETURNS jsonb /* pgrx :: JsonB */
STRICT
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', '_define_policy_wrapper';

-- pg_retention/src/api/erasure.rs:13
-- pg_retention::api::erasure::_erase
CREATE OR REPLACE FUNCTION "_erase"(
	"relation" oid, /* Option < pg_sys :: Oid > */
	"predicate" TEXT, /* Option < & str > */
	"request_ref" TEXT, /* Option < & str > */
	"actor" TEXT, /* Option < & str > */
	"batch_rows" INT /* Option < i32 > */
) RETURNS jsonb /* pgrx :: JsonB */
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', '_erase_wrapper';

-- pg_retention/src/api/archive.rs:160
-- pg_retention::api::archive::_extend_lease
CREATE OR REPLACE FUNCTION "_extend_lease"(
	"batch" TEXT, /* & str */
	"lease" TEXT /* & str */
) RETURNS jsonb /* pgrx :: JsonB */
STRICT
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', '_extend_lease_wrapper';

-- pg_retention/src/guard.rs:153
-- pg_retention::guard::_fixpoint_eligible
CREATE OR REPLACE FUNCTION "_fixpoint_eligible"(
	"policy_id" bigint, /* i64 */
	"relation" oid, /* pg_sys :: Oid */
	"row" anyelement /* pgrx :: AnyElement */
) RETURNS bool /* bool */
STRICT STABLE SECURITY DEFINER PARALLEL RESTRICTED
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', '_fixpoint_eligible_wrapper';

-- pg_retention/src/api/hold.rs:138
-- pg_retention::api::hold::_hold_matches
CREATE OR REPLACE FUNCTION "_hold_matches"(
	"hold_id" bigint, /* i64 */
	"row" anyelement /* pgrx :: AnyElement */
) RETURNS bool /* bool */
STRICT STABLE SECURITY DEFINER PARALLEL RESTRICTED
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', '_hold_matches_wrapper';

-- pg_retention/src/api/hold.rs:88
-- pg_retention::api::hold::_lift_hold
CREATE OR REPLACE FUNCTION "_lift_hold"(
	"hold_id" bigint, /* i64 */
	"actor" TEXT, /* & str */
	"reason" TEXT /* & str */
) RETURNS jsonb /* pgrx :: JsonB */
STRICT
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', '_lift_hold_wrapper';

-- pg_retention/src/api/policy.rs:427
-- pg_retention::api::policy::_link_windows
CREATE OR REPLACE FUNCTION "_link_windows"(
	"producer" TEXT, /* & str */
	"consumer" TEXT, /* & str */
	"margin" TEXT /* & str */
) RETURNS jsonb /* pgrx :: JsonB */
STRICT
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', '_link_windows_wrapper';

-- pg_retention/src/api/policy.rs:336
-- pg_retention::api::policy::_lower_floor
CREATE OR REPLACE FUNCTION "_lower_floor"(
	"policy" TEXT, /* Option < & str > */
	"keep_floor" INT, /* Option < i32 > */
	"window_floor" TEXT, /* Option < & str > */
	"actor" TEXT, /* Option < & str > */
	"reason" TEXT /* Option < & str > */
) RETURNS jsonb /* pgrx :: JsonB */
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', '_lower_floor_wrapper';

-- pg_retention/src/archive/namespace.rs:144
-- pg_retention::archive::namespace::_missing_archives
CREATE OR REPLACE FUNCTION "_missing_archives"() RETURNS bigint /* Option < i64 > */
STRICT STABLE SECURITY DEFINER
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', '_missing_archives_wrapper';

-- pg_retention/src/api/worker.rs:92
-- pg_retention::api::worker::_overdue
CREATE OR REPLACE FUNCTION "_overdue"(
	"policy_id" bigint, /* i64 */
	"grace" TEXT /* & str */
) RETURNS TEXT /* Option < String > */
STRICT SECURITY DEFINER
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', '_overdue_wrapper';

-- pg_retention/src/api/hold.rs:52
-- pg_retention::api::hold::_place_hold
CREATE OR REPLACE FUNCTION "_place_hold"(
	"relation" oid, /* pg_sys :: Oid */
	"predicate" TEXT, /* & str */
	"reason" TEXT, /* & str */
	"actor" TEXT /* & str */
) RETURNS jsonb /* pgrx :: JsonB */
STRICT
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', '_place_hold_wrapper';

-- pg_retention/src/api/hold.rs:96
-- pg_retention::api::hold::_predicate_problem
CREATE OR REPLACE FUNCTION "_predicate_problem"(
	"relation" oid, /* pg_sys :: Oid */
	"predicate" TEXT, /* & str */
	"author" oid, /* pg_sys :: Oid */
	"built_in_only" bool /* bool */
) RETURNS TEXT /* Option < String > */
STRICT SECURITY DEFINER
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', '_predicate_problem_wrapper';

-- pg_retention/src/api/worker.rs:61
-- pg_retention::api::worker::_preloaded
CREATE OR REPLACE FUNCTION "_preloaded"() RETURNS bool /* bool */
STRICT SECURITY DEFINER
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', '_preloaded_wrapper';

-- pg_retention/src/api/consumer.rs:161
-- pg_retention::api::consumer::_register_consumer
CREATE OR REPLACE FUNCTION "_register_consumer"(
	"policy" TEXT, /* Option < & str > */
	"consumer" TEXT, /* Option < & str > */
	"lease" TEXT, /* Option < & str > */
	"reporter" oid /* Option < pg_sys :: Oid > */
) RETURNS jsonb /* pgrx :: JsonB */
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', '_register_consumer_wrapper';

-- pg_retention/src/api/archive.rs:167
-- pg_retention::api::archive::_release_batch
CREATE OR REPLACE FUNCTION "_release_batch"(
	"batch" TEXT, /* & str */
	"reason" TEXT /* & str */
) RETURNS jsonb /* pgrx :: JsonB */
STRICT
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', '_release_batch_wrapper';

-- pg_retention/src/api/consumer.rs:242
-- pg_retention::api::consumer::_report_position
CREATE OR REPLACE FUNCTION "_report_position"(
	"policy" TEXT, /* & str */
	"consumer" TEXT, /* & str */
	"epoch" bigint, /* i64 */
	"position" TEXT /* & str */
) RETURNS jsonb /* pgrx :: JsonB */
STRICT
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', '_report_position_wrapper';

-- pg_retention/src/api/sweep.rs:144
-- pg_retention::api::sweep::_run_begin
CREATE OR REPLACE FUNCTION "_run_begin"(
	"policy_id" bigint, /* Option < i64 > */
	"actor" TEXT, /* Option < & str > */
	"cycle_remaining" bigint, /* Option < i64 > */
	"contained" bool /* Option < bool > */
) RETURNS jsonb /* Option < pgrx :: JsonB > */
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', '_run_begin_wrapper';

-- pg_retention/src/api/sweep.rs:292
-- pg_retention::api::sweep::_run_end
CREATE OR REPLACE FUNCTION "_run_end"(
	"state" jsonb, /* pgrx :: JsonB */
	"contained" bool /* bool */
) RETURNS jsonb /* pgrx :: JsonB */
STRICT SECURITY DEFINER
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', '_run_end_wrapper';

-- pg_retention/src/api/sweep.rs:234
-- pg_retention::api::sweep::_run_pace
CREATE OR REPLACE FUNCTION "_run_pace"(
	"state" jsonb /* pgrx :: JsonB */
) RETURNS jsonb /* pgrx :: JsonB */
STRICT SECURITY DEFINER
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', '_run_pace_wrapper';

-- pg_retention/src/api/worker.rs:30
-- pg_retention::api::worker::_served
CREATE OR REPLACE FUNCTION "_served"() RETURNS bool /* bool */
STRICT SECURITY DEFINER
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', '_served_wrapper';

-- pg_retention/src/api/policy.rs:392
-- pg_retention::api::policy::_set_policy_state
CREATE OR REPLACE FUNCTION "_set_policy_state"(
	"name" TEXT, /* & str */
	"change" TEXT /* & str */
) RETURNS bigint /* i64 */
STRICT
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', '_set_policy_state_wrapper';

-- pg_retention/src/api/erasure.rs:84
-- pg_retention::api::erasure::_supersession_done
CREATE OR REPLACE FUNCTION "_supersession_done"(
	"supersession" bigint, /* i64 */
	"actor" TEXT /* & str */
) RETURNS jsonb /* pgrx :: JsonB */
STRICT SECURITY DEFINER
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', '_supersession_done_wrapper';

-- pg_retention/src/api/erasure.rs:35
-- pg_retention::api::erasure::_supersession_matches
CREATE OR REPLACE FUNCTION "_supersession_matches"(
	"supersession" bigint, /* i64 */
	"slice" bytea, /* & [u8] */
	"columns" TEXT[] /* Vec < Option < String > > */
) RETURNS jsonb /* pgrx :: JsonB */
STRICT SECURITY DEFINER
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', '_supersession_matches_wrapper';

-- pg_retention/src/api/erasure.rs:58
-- pg_retention::api::erasure::_supersession_rewritten
CREATE OR REPLACE FUNCTION "_supersession_rewritten"(
	"supersession" bigint, /* i64 */
	"replaced_key" TEXT, /* & str */
	"object_key" TEXT, /* & str */
	"blake3" TEXT, /* & str */
	"rows" bigint, /* i64 */
	"bytes" bigint, /* i64 */
	"supersedes" TEXT /* & str */
) RETURNS jsonb /* pgrx :: JsonB */
STRICT SECURITY DEFINER
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', '_supersession_rewritten_wrapper';

-- pg_retention/src/api/erasure.rs:50
-- pg_retention::api::erasure::_supersession_unaffected
CREATE OR REPLACE FUNCTION "_supersession_unaffected"(
	"supersession" bigint, /* i64 */
	"reason" TEXT /* & str */
) RETURNS jsonb /* pgrx :: JsonB */
STRICT SECURITY DEFINER
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', '_supersession_unaffected_wrapper';

-- pg_retention/src/api/sweep.rs:190
-- pg_retention::api::sweep::_sweep_step_safe
CREATE OR REPLACE FUNCTION "_sweep_step_safe"(
	"state" jsonb /* pgrx :: JsonB */
) RETURNS jsonb /* pgrx :: JsonB */
STRICT SECURITY DEFINER
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', '_sweep_step_safe_wrapper';

-- pg_retention/src/catalog/tree.rs:98
-- pg_retention::catalog::tree::_tree_of
CREATE OR REPLACE FUNCTION "_tree_of"(
	"relation" oid /* pg_sys :: Oid */
) RETURNS SETOF oid /* pg_sys :: Oid */
STRICT STABLE PARALLEL SAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', '_tree_of_wrapper';

-- pg_retention/src/api/consumer.rs:265
-- pg_retention::api::consumer::_unregister_consumer
CREATE OR REPLACE FUNCTION "_unregister_consumer"(
	"policy" TEXT, /* & str */
	"consumer" TEXT /* & str */
) RETURNS jsonb /* pgrx :: JsonB */
STRICT
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', '_unregister_consumer_wrapper';

-- pg_retention/src/api/worker.rs:39
-- pg_retention::api::worker::_wake_launcher
CREATE OR REPLACE FUNCTION "_wake_launcher"() RETURNS bool /* bool */
STRICT SECURITY DEFINER
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', '_wake_launcher_wrapper';

-- pg_retention/src/archive/namespace.rs:71
-- pg_retention::archive::namespace::archive_namespace
CREATE OR REPLACE FUNCTION "archive_namespace"() RETURNS TABLE (
	"namespace" TEXT,  /* String */
	"system_identifier" TEXT,  /* String */
	"database_oid" bigint,  /* i64 */
	"database_name" TEXT  /* String */
)
STRICT SECURITY DEFINER
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'archive_namespace_wrapper';

-- pg_retention/src/api/archive.rs:105
-- pg_retention::api::archive::claimed_slice
CREATE OR REPLACE FUNCTION "claimed_slice"(
	"batch" uuid /* pgrx :: Uuid */
) RETURNS SETOF bytea /* Vec < u8 > */
STRICT
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'claimed_slice_wrapper';

-- pg_retention/src/api/preview.rs:67
-- pg_retention::api::preview::preview
CREATE OR REPLACE FUNCTION "preview"(
	"policy" TEXT DEFAULT NULL /* Option < & str > */
) RETURNS TABLE (
	"policy" TEXT,  /* String */
	"eligible" bigint,  /* i64 */
	"held" bigint,  /* i64 */
	"hold_ids" bigint[],  /* Vec < i64 > */
	"would_delete" bigint,  /* i64 */
	"backlog" bigint,  /* i64 */
	"archive_bytes_estimate" bigint,  /* Option < i64 > */
	"partitions_to_drop" bigint,  /* i64 */
	"pinned" bigint,  /* i64 */
	"referenced" bigint,  /* i64 */
	"table_would_delete" bigint  /* i64 */
)
SECURITY DEFINER
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'preview_wrapper';

-- pg_retention/src/api/preview.rs:106
-- pg_retention::api::preview::preview_partitions
CREATE OR REPLACE FUNCTION "preview_partitions"(
	"policy" TEXT /* & str */
) RETURNS TABLE (
	"partition" TEXT,  /* String */
	"bound" TEXT,  /* String */
	"rows" bigint,  /* i64 */
	"proof" TEXT  /* String */
)
STRICT SECURITY DEFINER
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'preview_partitions_wrapper';

-- pg_retention/src/archive/namespace.rs:109
-- pg_retention::archive::namespace::record_archive_verification
CREATE OR REPLACE FUNCTION "record_archive_verification"(
	"checked" bigint, /* i64 */
	"missing" bigint, /* i64 */
	"failed" bigint, /* i64 */
	"unreferenced" bigint /* i64 */
) RETURNS void
STRICT SECURITY DEFINER
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'record_archive_verification_wrapper';

-- pg_retention/src/archive/namespace.rs:88
-- pg_retention::archive::namespace::set_archive_namespace
CREATE OR REPLACE FUNCTION "set_archive_namespace"(
	"namespace" TEXT /* & str */
) RETURNS TEXT /* String */
STRICT SECURITY DEFINER
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'set_archive_namespace_wrapper';

-- pg_retention/src/api/version.rs:6
-- pg_retention::api::version::version
CREATE OR REPLACE FUNCTION "version"() RETURNS TEXT /* & '_ str */
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'version_wrapper';

-- pg_retention/src/lib.rs:49
-- finalize
-- pg_retention public SQL surface. Thin wrappers over the Rust internals (the `_` functions),
-- plus the parts that are plain SQL: raising typed errors, run ordering, the run procedure,
-- the replay boundary. Runs last in the extension script (finalize).
--
-- Wrappers of entry points that act for their caller (policies, holds, consumers, erasure,
-- the archive claims and leases) are SECURITY INVOKER, and so are their Rust internals, which
-- note the role in force as the caller before taking the owner's privileges
-- (src/identity.rs): a SECURITY DEFINER wrapper would make every caller the owner.

-- Unwraps a result from a Rust internal: returns its value, or raises its error with the
-- SQLSTATE, message, detail and hint it carries. Errors are raised here, in plpgsql, because
-- pgrx re-raises errors of our own SQLSTATE class (RT) as XX000 when they cross Rust code.
CREATE OR REPLACE FUNCTION retention._result(r jsonb) RETURNS jsonb
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
CREATE OR REPLACE FUNCTION retention._predicate_check(rel oid, predicate text, author oid, built_in_only boolean)
RETURNS text
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
    RETURN retention._predicate_problem(rel, predicate, author, built_in_only);
EXCEPTION WHEN OTHERS THEN
    RETURN SQLERRM;
END
$fn$;

CREATE OR REPLACE FUNCTION retention.add_policy(
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
    age_pick text DEFAULT NULL
) RETURNS bigint
LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $fn$
    SELECT retention._result(retention._define_policy('add', jsonb_build_object(
        'name', name, 'relation', relation::oid::bigint, 'kind', kind, 'age_column', age_column,
        'older_than', older_than::text, 'scope', scope, 'terminal', terminal, 'group_by', group_by,
        'order_by', order_by, 'keep', keep, 'min_keep', min_keep, 'action', action,
        'batch_size', batch_size, 'max_rows_per_run', max_rows_per_run,
        'keep_floor', keep_floor, 'window_floor', window_floor::text,
        'archive_keep', archive_keep::text, 'lease_table', lease_table::oid::bigint,
        'lease_key', lease_key, 'lease_expiry', lease_expiry, 'search_path', search_path,
        'age_expression', age_expression, 'age_table', age_table::oid::bigint,
        'age_table_column', age_table_column, 'age_pick', age_pick)))::bigint;
$fn$;

CREATE OR REPLACE FUNCTION retention.alter_policy(
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
    age_pick text DEFAULT NULL
) RETURNS bigint
LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $fn$
    SELECT retention._result(retention._define_policy('alter', jsonb_build_object(
        'name', name, 'kind', kind, 'age_column', age_column, 'older_than', older_than::text,
        'scope', scope, 'terminal', terminal, 'group_by', group_by, 'order_by', order_by,
        'keep', keep, 'min_keep', min_keep, 'action', action, 'batch_size', batch_size,
        'max_rows_per_run', max_rows_per_run, 'keep_floor', keep_floor,
        'window_floor', window_floor::text, 'archive_keep', archive_keep::text,
        'lease_table', lease_table::oid::bigint, 'lease_key', lease_key, 'lease_expiry', lease_expiry,
        'search_path', search_path, 'age_expression', age_expression,
        'age_table', age_table::oid::bigint, 'age_table_column', age_table_column,
        'age_pick', age_pick)))::bigint;
$fn$;

-- Lowers a policy's keep_floor and/or window_floor (NULL: that floor unchanged; 0 or
-- '0 seconds': none), a new version of the policy and a 'lower_floor' ledger entry naming who
-- and why. Raising goes through alter_policy; nothing else lowers a floor.
CREATE OR REPLACE FUNCTION retention.lower_floor(policy text, keep_floor int, window_floor interval, actor text, reason text)
RETURNS bigint
LANGUAGE sql SET search_path = pg_catalog, pg_temp
AS $fn$ SELECT retention._result(retention._lower_floor(policy, keep_floor, window_floor::text, actor, reason))::bigint $fn$;

CREATE OR REPLACE FUNCTION retention.enable_policy(name text) RETURNS bigint
LANGUAGE sql SET search_path = pg_catalog, pg_temp
AS $fn$ SELECT retention._set_policy_state(name, 'enable') $fn$;

CREATE OR REPLACE FUNCTION retention.disable_policy(name text) RETURNS bigint
LANGUAGE sql SET search_path = pg_catalog, pg_temp
AS $fn$ SELECT retention._set_policy_state(name, 'disable') $fn$;

CREATE OR REPLACE FUNCTION retention.drop_policy(name text) RETURNS bigint
LANGUAGE sql SET search_path = pg_catalog, pg_temp
AS $fn$ SELECT retention._set_policy_state(name, 'drop') $fn$;

CREATE OR REPLACE FUNCTION retention.link_windows(producer text, consumer text, margin interval) RETURNS void
LANGUAGE sql SET search_path = pg_catalog, pg_temp
AS $fn$ SELECT retention._result(retention._link_windows(producer, consumer, margin::text)) $fn$;

CREATE OR REPLACE FUNCTION retention.place_hold(relation regclass, predicate text, reason text, actor text)
RETURNS bigint
LANGUAGE sql SET search_path = pg_catalog, pg_temp
AS $fn$ SELECT retention._result(retention._place_hold(relation::oid, predicate, reason, actor))::bigint $fn$;

CREATE OR REPLACE FUNCTION retention.lift_hold(hold_id bigint, actor text, reason text) RETURNS void
LANGUAGE sql SET search_path = pg_catalog, pg_temp
AS $fn$ SELECT retention._result(retention._lift_hold(hold_id, actor, reason)) $fn$;

-- Pull consumers (api/consumer.rs): a registration's epoch, reports of the position processed,
-- and what each pins.
CREATE OR REPLACE FUNCTION retention.register_consumer(policy text, consumer text, lease interval,
                                            reporter regrole DEFAULT NULL) RETURNS bigint
LANGUAGE sql SET search_path = pg_catalog, pg_temp
AS $fn$ SELECT retention._result(retention._register_consumer(policy, consumer, lease::text, reporter::oid))::bigint $fn$;

CREATE OR REPLACE FUNCTION retention.report_position(policy text, consumer text, epoch bigint, "position" text)
RETURNS text
LANGUAGE sql SET search_path = pg_catalog, pg_temp
AS $fn$ SELECT retention._result(retention._report_position(policy, consumer, epoch, $4)) #>> '{}' $fn$;

CREATE OR REPLACE FUNCTION retention.unregister_consumer(policy text, consumer text) RETURNS void
LANGUAGE sql SET search_path = pg_catalog, pg_temp
AS $fn$ SELECT retention._result(retention._unregister_consumer(policy, consumer)) $fn$;

CREATE OR REPLACE FUNCTION retention.consumer_status(policy text, consumer text)
RETURNS TABLE (epoch bigint, floor text, requires_bootstrap boolean, lease_expires_at timestamptz,
               pinning boolean)
LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $fn$
    SELECT r.epoch, r.floor, r.requires_bootstrap, r.lease_expires_at, r.pinning
      FROM jsonb_to_record(retention._result(retention._consumer_status(policy, consumer)))
           AS r(epoch bigint, floor text, requires_bootstrap boolean, lease_expires_at timestamptz,
                pinning boolean)
$fn$;

-- What the live consumers of a policy pin, for the statements that delete (which run as the
-- policy's owner and read it once per statement): 'none' (no live consumer), 'all' (one has
-- not reported in its epoch yet), or 'floor' (rows from the lowest of _consumer_positions on stay).
CREATE OR REPLACE FUNCTION retention._consumer_pins(policy_id bigint) RETURNS text
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
    SELECT CASE WHEN count(*) = 0 THEN 'none' WHEN bool_or(c.position IS NULL) THEN 'all' ELSE 'floor' END
      FROM retention.consumer_registrations c
     WHERE c.policy_id = _consumer_pins.policy_id AND c.expires_at > now()
$fn$;

-- The positions the live consumers of a policy reported, as text: the statements that delete
-- (which run as the policy's owner) cast them to the order column's type themselves, so a
-- domain's CHECK runs as that owner and the type comes from the catalog, not from a caller.
CREATE OR REPLACE FUNCTION retention._consumer_positions(policy_id bigint) RETURNS SETOF text
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
    SELECT c.position FROM retention.consumer_registrations c
     WHERE c.policy_id = _consumer_positions.policy_id AND c.expires_at > now()
$fn$;

-- The oldest instant still inside a policy's window: replays from before it may find rows gone.
CREATE OR REPLACE FUNCTION retention.replay_floor(policy text) RETURNS timestamptz
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
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
CREATE OR REPLACE FUNCTION retention.check_replay(policy text, from_ts timestamptz) RETURNS timestamptz
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
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
-- parents (a table that references another is swept first), then producers before their
-- consumers (window links), then by name.
CREATE OR REPLACE FUNCTION retention._run_order(policy text) RETURNS TABLE (id bigint, name text)
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
CREATE OR REPLACE FUNCTION retention._lock_key(policy_id bigint) RETURNS bigint
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog
AS $fn$ SELECT (x'52544e00'::bigint << 32) | policy_id $fn$;




-- Sweeps delete-action policies now (one, or all when policy is NULL), committing after every
-- step. A policy whose lock is held by another pruner is skipped and that is ledgered. When
-- any policy's run ended in error, raises RT601 at the end, naming them (what succeeded is
-- committed), so a scheduler records the job as failed.
CREATE OR REPLACE PROCEDURE retention.run(policy text DEFAULT NULL)
LANGUAGE plpgsql AS $fn$
DECLARE
    p record;
    st jsonb;
    n int := 0;
    pace jsonb;
    failed text[] := '{}';
BEGIN
    IF run.policy IS NOT NULL AND NOT EXISTS (SELECT 1 FROM retention.policies x WHERE x.name = run.policy) THEN
        RAISE EXCEPTION 'policy % does not exist', run.policy USING ERRCODE = '42704', HINT = 'See retention.policies.';
    END IF;
    FOR p IN SELECT * FROM retention._run_order(run.policy) LOOP
        n := n + 1;
        st := retention._run_begin(p.id, current_user::text, NULL, false);
        COMMIT;
        IF st IS NULL THEN
            RAISE NOTICE 'policy %: skipped, another pruner holds its lock', p.name;
            CONTINUE;
        END IF;
        WHILE NOT (st->>'done')::boolean LOOP
            st := retention._sweep_step_safe(st);
            COMMIT;
            -- Pacing: wait between steps, outside their transactions (_run_pace times the
            -- pause and ledgers it once it is over).
            IF NOT (st->>'done')::boolean THEN
                LOOP
                    pace := retention._run_pace(st);
                    EXIT WHEN (pace->>'pause')::float8 <= 0;
                    PERFORM pg_sleep(least((pace->>'pause')::float8, 0.5));
                    COMMIT;
                END LOOP;
                COMMIT;
            END IF;
        END LOOP;
        st := retention._run_end(st, false);
        COMMIT;
        RAISE NOTICE 'policy %: % (% rows deleted in % batches)%', p.name, st->>'outcome',
            st->>'deleted', st->>'batches', coalesce(': ' || (st->>'reason'), '');
        IF st->>'outcome' = 'error' THEN
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
CREATE OR REPLACE FUNCTION retention._ledger_skip_locked(policy_id bigint, actor text) RETURNS void
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
CREATE OR REPLACE FUNCTION retention._worker_visit(OUT visiting boolean, OUT resume bigint[])
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
CREATE OR REPLACE FUNCTION retention._worker_set(state text, policy text) RETURNS void
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
CREATE OR REPLACE FUNCTION retention._worker_visit_end(state text, resume bigint[], next_visit_secs float8)
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
CREATE OR REPLACE FUNCTION retention._worker_pause(policy text, reason text) RETURNS void
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
CREATE OR REPLACE FUNCTION retention._ledger_pause(policy_id bigint, reason text, seconds float8, actor text)
RETURNS void
LANGUAGE sql STRICT SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
    SELECT retention._ledger_append('pause', actor,
        jsonb_build_object('reason', reason, 'seconds', round(seconds::numeric, 3)), policy_id);
$fn$;

-- Ledgers the policies a cycle did not reach because the cycle cap was hit.
CREATE OR REPLACE FUNCTION retention._worker_cycle_cap(cap bigint, skipped text[]) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
    SELECT retention._ledger_append('cycle_cap', 'worker',
               jsonb_build_object('warning', 'cycle cap reached before this policy ran', 'cap', $1), p.id)
      FROM retention.policies p WHERE p.name = ANY ($2);
$fn$;



-- Asks for a visit to this database now (the launcher gives it the next free worker, after
-- a visit under way ends). Returns whether the launcher was told.
CREATE OR REPLACE FUNCTION retention.wake() RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
    UPDATE retention.worker_state w SET wake_requested_at = clock_timestamp()
     WHERE w.database = current_database();
    RETURN retention._wake_launcher();
END
$fn$;

-- One row per live policy: healthy, and why not.
CREATE OR REPLACE FUNCTION retention.health()
RETURNS TABLE (policy text, healthy boolean, reasons text[])
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
BEGIN
    FOR p IN SELECT * FROM retention.policies ORDER BY name LOOP
        r := '{}';
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
        RETURN NEXT;
    END LOOP;
END
$fn$;

-- ---- Archive-then-prune. ----

-- Guard trigger of archive policies: refuses to update a row that is already archive-eligible.
-- TG_ARGV[0] is the policy id, TG_ARGV[1] its name. Eligibility is evaluated by
-- retention._fixpoint_eligible with the privileges of the policy's owner, not of whoever
-- updates the table. SECURITY DEFINER: a writer needs its table privileges and nothing of
-- schema retention (it fires as whoever updates; the predicate still runs as its author).
CREATE OR REPLACE FUNCTION retention._fixpoint_guard() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
    IF retention._fixpoint_eligible(TG_ARGV[0]::bigint, TG_RELID, OLD) THEN
        RAISE EXCEPTION 'row of %.% is archive-eligible under policy % and cannot be updated',
                TG_TABLE_SCHEMA, TG_TABLE_NAME, TG_ARGV[1]
            USING ERRCODE = 'RT501',
                  DETAIL = 'The row is terminal and past the policy''s window: it is being or will be archived as it is.',
                  HINT = 'Deleting it is allowed; changing it is not. Lift this by altering or dropping the policy.';
    END IF;
    RETURN NEW;
END
$fn$;

-- retention._below (a table and every partition under it) and retention._tree_of (the tables
-- that share rows with a table) are in Rust: src/catalog/tree.rs.

-- How many holds have ever reached a table's rows: the hold fence of the delete statements,
-- which run as a policy's owner and cannot read the catalog themselves.
CREATE OR REPLACE FUNCTION retention._hold_count(relation oid) RETURNS bigint
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$ SELECT count(*) FROM retention.hold_records h
         WHERE h.relation::oid IN (SELECT retention._tree_of(_hold_count.relation)) $fn$;

-- The first and last keys of the live (claimed) batches of a table, for a claim's statement
-- that runs as the policy's owner: it casts them to the key's types as that role.
CREATE OR REPLACE FUNCTION retention._live_batches(relation oid) RETURNS TABLE (first_key text[], last_key text[])
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$ SELECT b.first_key, b.last_key FROM retention.batches b
         WHERE b.relation = _live_batches.relation AND b.state = 'claimed' AND b.first_key IS NOT NULL $fn$;

-- The archive protocol. Each wrapper pins the settings that shape text output, so a batch's
-- rows render to the same bytes in batch_frames and complete_batch whatever the session says.
CREATE OR REPLACE FUNCTION retention.claim_batch(policy text, max_rows int DEFAULT 10000,
                                      lease interval DEFAULT '10 minutes', owner text DEFAULT NULL)
RETURNS uuid
LANGUAGE sql SET search_path = pg_catalog, pg_temp
    SET TimeZone = 'UTC' SET DateStyle = 'ISO, YMD' SET IntervalStyle = 'postgres'
    SET extra_float_digits = 1 SET bytea_output = 'hex'
AS $fn$ SELECT (retention._result(retention._claim_batch(policy, max_rows, lease::text, owner)) #>> '{}')::uuid $fn$;

-- claim_batch and batch_slice in one call: the slice is rendered from the rows the claim reads
-- and locks, so they are read once. A resumed batch is rendered from its key set; resume =>
-- false leaves the owner's unfinished batch alone (an archiver with a batch in flight).
-- (NULL, NULL) when nothing is claimable.
CREATE OR REPLACE FUNCTION retention.claim_slice(policy text, max_rows int DEFAULT 10000,
                                      lease interval DEFAULT '10 minutes', owner text DEFAULT NULL,
                                      resume boolean DEFAULT true,
                                      OUT batch uuid, OUT slice bytea, OUT more boolean)
LANGUAGE sql SET search_path = pg_catalog, pg_temp
    SET TimeZone = 'UTC' SET DateStyle = 'ISO, YMD' SET IntervalStyle = 'postgres'
    SET extra_float_digits = 1 SET bytea_output = 'hex'
AS $fn$ SELECT (retention._result(c.result) #>> '{}')::uuid, c.slice, c.more
          FROM retention._claim_slice(policy, max_rows, lease::text, owner, resume) c $fn$;

-- claim_slice without the slice in its result: it stays in this backend, and
-- retention.claimed_slice(batch) returns it once, in 64 kB pieces, straight from C (the SQL
-- layers copied the whole slice three times). bytes: its length; manifest: batch_manifest(batch,
-- false). (NULL, NULL, false, NULL) when nothing is claimable.
CREATE OR REPLACE FUNCTION retention.claim_next(policy text, max_rows int DEFAULT 10000,
                                     lease interval DEFAULT '10 minutes', owner text DEFAULT NULL,
                                     resume boolean DEFAULT true,
                                     OUT batch uuid, OUT bytes bigint, OUT more boolean,
                                     OUT manifest jsonb)
LANGUAGE sql SET search_path = pg_catalog, pg_temp
    SET TimeZone = 'UTC' SET DateStyle = 'ISO, YMD' SET IntervalStyle = 'postgres'
    SET extra_float_digits = 1 SET bytea_output = 'hex'
AS $fn$ SELECT (r->>'batch')::uuid, (r->>'bytes')::bigint, coalesce((r->>'more')::boolean, false),
               r->'manifest'
          FROM retention._result(retention._claim_next(policy, max_rows, lease::text, owner, resume)) r $fn$;

-- The enabled archive policies: what an archiver has to work on.
CREATE OR REPLACE FUNCTION retention.archive_policies() RETURNS SETOF text
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$ SELECT p.name FROM retention.policies p WHERE p.enabled AND p.action = 'archive_then_delete' ORDER BY p.name $fn$;

CREATE OR REPLACE FUNCTION retention.batch_manifest(batch uuid, digest boolean DEFAULT true) RETURNS jsonb
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
    SET TimeZone = 'UTC' SET DateStyle = 'ISO, YMD' SET IntervalStyle = 'postgres'
    SET extra_float_digits = 1 SET bytea_output = 'hex'
AS $fn$ SELECT retention._result(retention._batch_manifest(batch::text, digest)) $fn$;

CREATE OR REPLACE FUNCTION retention.batch_frames(batch uuid) RETURNS SETOF bytea
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
    SET TimeZone = 'UTC' SET DateStyle = 'ISO, YMD' SET IntervalStyle = 'postgres'
    SET extra_float_digits = 1 SET bytea_output = 'hex'
AS $fn$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT f.error, f.frame FROM retention._batch_frames(batch::text) f LOOP
        IF r.error IS NOT NULL THEN
            PERFORM retention._result(r.error);
        END IF;
        RETURN NEXT r.frame;
    END LOOP;
END
$fn$;

-- The frames of batch_frames concatenated: the slice, in one value (one call, one copy).
CREATE OR REPLACE FUNCTION retention.batch_slice(batch uuid) RETURNS bytea
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
    SET TimeZone = 'UTC' SET DateStyle = 'ISO, YMD' SET IntervalStyle = 'postgres'
    SET extra_float_digits = 1 SET bytea_output = 'hex'
AS $fn$ SELECT CASE WHEN retention._result(s.result) IS NOT NULL THEN s.slice END
          FROM retention._batch_slice(batch::text) s $fn$;

CREATE OR REPLACE FUNCTION retention.extend_lease(batch uuid, lease interval) RETURNS timestamptz
LANGUAGE sql SET search_path = pg_catalog, pg_temp
AS $fn$ SELECT (retention._result(retention._extend_lease(batch::text, lease::text)) #>> '{}')::timestamptz $fn$;

CREATE OR REPLACE FUNCTION retention.release_batch(batch uuid, reason text) RETURNS boolean
LANGUAGE sql SET search_path = pg_catalog, pg_temp
AS $fn$ SELECT (retention._result(retention._release_batch(batch::text, reason)))::boolean $fn$;

CREATE OR REPLACE FUNCTION retention.complete_batch(batch uuid, object_key text, blake3 text, rows bigint, bytes bigint,
                                         owner text DEFAULT NULL)
RETURNS bigint
LANGUAGE sql SET search_path = pg_catalog, pg_temp
    SET TimeZone = 'UTC' SET DateStyle = 'ISO, YMD' SET IntervalStyle = 'postgres'
    SET extra_float_digits = 1 SET bytea_output = 'hex'
AS $fn$ SELECT (retention._result(retention._complete_batch(batch::text, object_key, blake3, rows, bytes, owner)))::bigint $fn$;

-- Archive lifecycle (archive/expiry.rs; the archiver's `expire`, archiver/src/expire.rs):
-- archives past their policy's archive_keep, the holds over an archive's rows, and expire
-- operations, whose state lives in the ledger (expire_prepare, expire_apply entries).
CREATE OR REPLACE FUNCTION retention.expiry_candidates()
RETURNS TABLE (policy text, policy_version int, archive_keep interval, archive_id bigint, batch uuid,
               object_key text, rows bigint, bytes bigint, archived_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
    SELECT p.name, p.version, p.archive_keep, a.id, a.batch, a.object_key, a.rows, a.bytes, a.archived_at
      FROM retention.policies p
      JOIN retention.batches b ON b.policy_id = p.id
      JOIN retention.archives a ON a.batch = b.id
     WHERE p.action = 'archive_then_delete' AND p.archive_keep IS NOT NULL
       AND a.archived_at < now() - p.archive_keep
       AND a.expired_at IS NULL
     ORDER BY p.name, a.id
$fn$;

CREATE OR REPLACE FUNCTION retention.archive_holds(archive_id bigint, slice bytea, columns text[]) RETURNS bigint[]
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
    SELECT ARRAY(SELECT jsonb_array_elements_text(
        retention._result(retention._archive_holds(archive_id, slice, columns)))::bigint)
$fn$;

-- The prepare entry of an expire operation (NULL when it was never prepared).
CREATE OR REPLACE FUNCTION retention._expire_prepared(operation uuid) RETURNS retention.ledger_entries
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
    SELECT l FROM retention.ledger_entries l
     WHERE l.method = 'expire_prepare' AND l.detail->>'operation' = operation::text
$fn$;

-- Records a prepared expire operation (its tombstone is written): from now on its archives
-- expire after the quiescence interval, and only through `expire apply`. Returns when it was
-- prepared.
CREATE OR REPLACE FUNCTION retention.expire_prepare(operation uuid, plan_sha256 text, quiescence interval,
                                         archive_ids bigint[], objects bigint, bytes bigint,
                                         tombstone text, actor text)
RETURNS timestamptz
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
    stale bigint[];
BEGIN
    IF quiescence IS NULL OR quiescence < interval '0' OR archive_ids IS NULL OR cardinality(archive_ids) = 0
       OR plan_sha256 !~ '^[0-9a-f]{64}$' OR coalesce(actor, '') = '' THEN
        RAISE EXCEPTION 'an expire operation needs a plan digest, archives, a quiescence >= 0 and an actor'
            USING ERRCODE = '22023', HINT = 'Prepare with pg-retention-archiver expire prepare.';
    END IF;
    IF (retention._expire_prepared(operation)).id IS NOT NULL THEN
        RAISE EXCEPTION 'expire operation % is prepared already', operation USING ERRCODE = '42710';
    END IF;
    stale := ARRAY(SELECT unnest(archive_ids) EXCEPT SELECT c.archive_id FROM retention.expiry_candidates() c);
    IF cardinality(stale) > 0 THEN
        RAISE EXCEPTION 'archives % are not past their policy''s archive_keep (or expired already)', stale
            USING ERRCODE = '55000', HINT = 'Plan again.';
    END IF;
    PERFORM retention._ledger_append('expire_prepare', actor, jsonb_build_object(
        'operation', operation, 'plan_sha256', plan_sha256, 'quiescence', quiescence::text,
        'archives', to_jsonb(archive_ids), 'objects', objects, 'bytes', bytes, 'tombstone', tombstone), NULL);
    RETURN (retention._expire_prepared(operation)).at;
END
$fn$;

-- An expire operation as the ledger knows it: when it was prepared and is ready, its plan
-- digest and archives, the keys its applies deleted and the last apply's outcome; NULL when
-- it was never prepared.
CREATE OR REPLACE FUNCTION retention.expire_state(operation uuid) RETURNS jsonb
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
    SELECT jsonb_build_object(
               'operation', operation, 'prepared_at', p.at, 'prepared_by', p.actor,
               'ready_at', p.at + (p.detail->>'quiescence')::interval,
               'ready', clock_timestamp() >= p.at + (p.detail->>'quiescence')::interval,
               'plan_sha256', p.detail->>'plan_sha256', 'archives', p.detail->'archives',
               'objects', p.detail->'objects', 'bytes', p.detail->'bytes',
               'tombstone', p.detail->>'tombstone',
               'applies', (SELECT count(*) FROM retention.ledger_entries a
                            WHERE a.method = 'expire_apply' AND a.detail->>'operation' = operation::text),
               'deleted_keys', (SELECT coalesce(jsonb_agg(DISTINCT k), '[]') FROM retention.ledger_entries a,
                                       jsonb_array_elements_text(a.detail->'deleted_keys') k
                                 WHERE a.method = 'expire_apply' AND a.detail->>'operation' = operation::text),
               'outcome', (SELECT a.detail->>'outcome' FROM retention.ledger_entries a
                            WHERE a.method = 'expire_apply' AND a.detail->>'operation' = operation::text
                            ORDER BY a.id DESC LIMIT 1))
      FROM retention._expire_prepared(operation) p WHERE p.id IS NOT NULL
$fn$;

-- Ledgers one apply of an expire operation; a completed one marks its archives expired. An
-- archive is marked expired only when its object now is among the keys the operation deleted
-- (this apply's or an earlier one's): a rewrite recorded for it since the plan (an erasure's
-- supersession) refuses the completion (RT504), and the apply is then recorded refused.
CREATE OR REPLACE FUNCTION retention.expire_record(operation uuid, outcome text, deleted_keys text[], detail jsonb, actor text)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
    prepared retention.ledger_entries := retention._expire_prepared(operation);
    archive_ids bigint[];
    kept bigint[];
BEGIN
    IF outcome IS NULL OR outcome NOT IN ('completed', 'partial', 'refused', 'not_ready') OR coalesce(actor, '') = '' THEN
        RAISE EXCEPTION 'an apply outcome is completed, partial, refused or not_ready, with an actor'
            USING ERRCODE = '22023';
    END IF;
    IF prepared.id IS NULL THEN
        RAISE EXCEPTION 'expire operation % was never prepared', operation USING ERRCODE = '42704';
    END IF;
    IF outcome = 'completed' THEN
        archive_ids := ARRAY(SELECT x::bigint FROM jsonb_array_elements_text(prepared.detail->'archives') x);
        -- One at a time with a rewrite being recorded for one of the archives (archive/supersede.rs
        -- takes the same lock), then read in a statement of its own, as committed.
        PERFORM 1 FROM retention.archive_records a WHERE a.id = ANY (archive_ids)
          ORDER BY a.id FOR NO KEY UPDATE;
        kept := ARRAY(
            SELECT a.id FROM retention.archives a
             WHERE a.id = ANY (archive_ids) AND a.expired_at IS NULL
               AND a.object_key <> ALL (coalesce(deleted_keys, '{}') || ARRAY(
                       SELECT k FROM retention.ledger_entries l, jsonb_array_elements_text(l.detail->'deleted_keys') k
                        WHERE l.method = 'expire_apply' AND l.detail->>'operation' = operation::text))
             ORDER BY a.id);
        IF cardinality(kept) > 0 THEN
            RAISE EXCEPTION 'expire operation % cannot complete: the object of archive % now is not one it deleted',
                operation, kept[1]
                USING ERRCODE = 'RT504',
                      DETAIL = format('Archives %s: a rewrite (an erasure''s supersession) became the object after the plan; '
                                      'marked expired, it would stay in the store with nothing to delete it.', kept),
                      HINT = 'Record the apply as refused and plan again: a new plan names the archive''s objects now.';
        END IF;
        INSERT INTO retention.archive_expirations (archive_id, operation_id)
        SELECT x, operation FROM unnest(archive_ids) x
        ON CONFLICT (archive_id) DO NOTHING;
    END IF;
    PERFORM retention._ledger_append('expire_apply', actor, coalesce(detail, '{}') || jsonb_build_object(
        'operation', operation, 'outcome', outcome, 'deleted_keys', to_jsonb(coalesce(deleted_keys, '{}'))), NULL);
END
$fn$;

-- What the archiver's sweep-orphans must not touch: every archive's slice key now and as
-- first recorded, the keys a rewrite replaced until they are deleted, the keys an open
-- supersession writes (retention._rewrite_key; each manifest beside its slice), and the ids
-- of live batches (their objects are named after them).
CREATE OR REPLACE FUNCTION retention.archive_object_refs(OUT archived text[], OUT live_batches text[])
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
CREATE OR REPLACE FUNCTION retention.metrics()
RETURNS TABLE (name text, labels jsonb, value float8, help text, type text)
LANGUAGE c SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET work_mem = '32MB'
AS 'MODULE_PATHNAME', 'retention_metrics';

-- ---- Erasure (api/erasure.rs, engine/erase.rs) and archive supersession (archive/supersede.rs;
-- the archiver's archiver/src/supersede.rs). ----

-- Deletes the rows of `relation` that match `predicate` now, whatever policies and holds say,
-- in statements of at most 10,000 rows, in the caller's transaction; archives with rows of the
-- table get a pending supersession. Returns the rows deleted.
CREATE OR REPLACE FUNCTION retention.erase(relation regclass, predicate text, request_ref text, actor text)
RETURNS bigint
LANGUAGE sql SET search_path = pg_catalog, pg_temp
AS $fn$ SELECT (retention._result(retention._erase(relation::oid, predicate, request_ref, actor, NULL))->>'deleted')::bigint $fn$;

-- One step of erase_in_batches: at most batch_rows rows; {deleted, done}.
CREATE OR REPLACE FUNCTION retention._erase_step(relation regclass, predicate text, request_ref text, actor text,
                                      batch_rows int)
RETURNS jsonb
LANGUAGE sql SET search_path = pg_catalog, pg_temp
AS $fn$ SELECT retention._result(retention._erase(relation::oid, predicate, request_ref, actor, batch_rows)) $fn$;

-- erase() for large sets: each batch of at most batch_rows rows commits with its ledger entry.
-- A failure leaves the batches before it erased and ledgered; calling again goes on.
CREATE OR REPLACE PROCEDURE retention.erase_in_batches(relation regclass, predicate text, request_ref text,
                                            actor text, batch_rows int DEFAULT 10000,
                                            INOUT erased bigint DEFAULT NULL)
LANGUAGE plpgsql AS $fn$
DECLARE
    st jsonb;
BEGIN
    erased := 0;
    LOOP
        st := retention._erase_step(erase_in_batches.relation, erase_in_batches.predicate,
                                    erase_in_batches.request_ref, erase_in_batches.actor,
                                    erase_in_batches.batch_rows);
        erased := erased + (st->>'deleted')::bigint;
        COMMIT;
        EXIT WHEN (st->>'done')::boolean;
    END LOOP;
END
$fn$;

-- The key a supersession writes the rewritten slice under: the original's, marked with the
-- supersession (create-only, so a retry after a crash finds its own bytes there).
CREATE OR REPLACE FUNCTION retention._rewrite_key(original text, supersession bigint) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $fn$
    SELECT regexp_replace(original, '\.slice$', '') || '.s' || supersession || '.slice'
$fn$;

-- The open supersessions, oldest first, one per archive (an archive's supersessions run in id
-- order): pending ones with the archive's object now, rewritten ones with the key to delete.
CREATE OR REPLACE FUNCTION retention.open_supersessions(max int DEFAULT 100)
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
CREATE OR REPLACE FUNCTION retention.supersession_matches(supersession bigint, slice bytea, columns text[])
RETURNS int[]
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
    SELECT ARRAY(SELECT jsonb_array_elements_text(
        retention._result(retention._supersession_matches(supersession, slice, columns)))::int)
$fn$;

-- A pending supersession with nothing to rewrite.
CREATE OR REPLACE FUNCTION retention.supersession_unaffected(supersession bigint, reason text) RETURNS boolean
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
    SELECT retention._result(retention._supersession_unaffected(supersession, reason))::boolean
$fn$;

-- Records the verified rewrite of a pending supersession: it is the archive's object from now
-- on. False when it was recorded already (by this archiver before a crash, or another).
CREATE OR REPLACE FUNCTION retention.supersession_rewritten(supersession bigint, replaced_key text, object_key text,
                                                 blake3 text, rows bigint, bytes bigint, supersedes text)
RETURNS boolean
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
    SELECT retention._result(retention._supersession_rewritten(supersession, replaced_key, object_key,
                                                               blake3, rows, bytes, supersedes))::boolean
$fn$;

-- The replaced objects are deleted: the supersession is done, and ledgered. False when it
-- was done already.
CREATE OR REPLACE FUNCTION retention.supersession_done(supersession bigint, actor text) RETURNS boolean
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
    SELECT retention._result(retention._supersession_done(supersession, actor))::boolean
$fn$;

-- What the index says of an object key (a slice's or its manifest's): 'current' (an archive's
-- object now) or 'superseded' (a rewrite replaced it), with the archive's key now; no row when
-- no archive knows it.
CREATE OR REPLACE FUNCTION retention.archive_object_state(key text, OUT state text, OUT current_key text)
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
CREATE OR REPLACE FUNCTION retention.ledger_orphan_objects(objects bigint, bytes bigint, keys text[], actor text)
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
GRANT EXECUTE ON FUNCTION retention._result(jsonb)
    TO retention_admin, retention_archiver, retention_consumer, retention_eraser;
GRANT EXECUTE ON FUNCTION retention._define_policy(text, jsonb),
    retention._lower_floor(text, int, text, text, text), retention._set_policy_state(text, text),
    retention._link_windows(text, text, text), retention._place_hold(oid, text, text, text),
    retention._lift_hold(bigint, text, text), retention._register_consumer(text, text, text, oid),
    retention._unregister_consumer(text, text)
    TO retention_admin;
GRANT EXECUTE ON FUNCTION retention._report_position(text, text, bigint, text),
    retention._consumer_status(text, text)
    TO retention_admin, retention_consumer;
GRANT EXECUTE ON FUNCTION retention._claim_batch(text, int, text, text),
    retention._claim_slice(text, int, text, text, boolean),
    retention._claim_next(text, int, text, text, boolean),
    retention._extend_lease(text, text), retention._release_batch(text, text),
    retention._complete_batch(text, text, text, bigint, bigint, text)
    TO retention_archiver;
GRANT EXECUTE ON FUNCTION retention._erase(oid, text, text, text, int) TO retention_eraser;
GRANT EXECUTE ON FUNCTION
    retention.add_policy(text, regclass, text, text, interval, text, text, text[], text, int, int, text, int, bigint, int, interval, interval, regclass, text[], text, text[], text, regclass, text, text),
    retention.alter_policy(text, text, text, interval, text, text, text[], text, int, int, text, int, bigint, int, interval, interval, regclass, text[], text, text[], text, regclass, text, text),
    retention.lower_floor(text, int, interval, text, text),
    retention.enable_policy(text), retention.disable_policy(text), retention.drop_policy(text),
    retention.link_windows(text, text, interval),
    retention.place_hold(regclass, text, text, text), retention.lift_hold(bigint, text, text),
    retention.register_consumer(text, text, interval, regrole), retention.unregister_consumer(text, text),
    retention.preview(text), retention.preview_partitions(text),
    retention.replay_floor(text), retention.check_replay(text, timestamptz),
    retention._run_order(text), retention._lock_key(bigint),
    retention._run_begin(bigint, text, bigint, boolean), retention._sweep_step_safe(jsonb),
    retention._run_pace(jsonb), retention._run_end(jsonb, boolean)
    TO retention_admin;
GRANT EXECUTE ON PROCEDURE retention.run(text) TO retention_admin;
GRANT EXECUTE ON FUNCTION retention.report_position(text, text, bigint, text),
    retention.consumer_status(text, text)
    TO retention_admin, retention_consumer;
GRANT EXECUTE ON FUNCTION retention.wake(), retention.health() TO retention_admin;
GRANT EXECUTE ON FUNCTION retention.claim_batch(text, int, interval, text), retention.claim_slice(text, int, interval, text, boolean),
    retention.claim_next(text, int, interval, text, boolean), retention.claimed_slice(uuid),
    retention.batch_manifest(uuid, boolean),
    retention.batch_frames(uuid), retention.batch_slice(uuid), retention.extend_lease(uuid, interval), retention.release_batch(uuid, text),
    retention.complete_batch(uuid, text, text, bigint, bigint, text), retention.archive_policies(),
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
    retention._run_begin(bigint, text, bigint, boolean), retention._sweep_step_safe(jsonb),
    retention._run_pace(jsonb), retention._run_end(jsonb, boolean), retention._worker_visit(),
    retention._worker_set(text, text), retention._worker_pause(text, text),
    retention._worker_visit_end(text, bigint[], float8), retention._worker_cycle_cap(bigint, text[])
    TO retention_worker;
-- Monitoring: retention.metrics() for pg_monitor (its members: postgres_exporter, sql_exporter),
-- retention_admin and the archiver (its /metrics).
GRANT EXECUTE ON FUNCTION retention.metrics() TO pg_monitor, retention_admin, retention_archiver;
-- Erasure outranks holds, so it has its own role (not granted to retention_admin).
GRANT EXECUTE ON FUNCTION retention.erase(regclass, text, text, text),
    retention._erase_step(regclass, text, text, text, int)
    TO retention_eraser;
GRANT EXECUTE ON PROCEDURE retention.erase_in_batches(regclass, text, text, text, int, bigint)
    TO retention_eraser;
-- One scrape of the archiver shows the whole system.
GRANT SELECT ON retention.stats TO retention_archiver;
-- The guard trigger needs no grant: PostgreSQL checks EXECUTE on a trigger function when the
-- trigger is made (by the extension's owner, guard.rs), not when it fires; it is SECURITY
-- DEFINER, and calls retention._fixpoint_eligible as the extension's owner.
-- What the statements that run as a policy's owner call (see pg_retention/src/author.rs).
GRANT EXECUTE ON FUNCTION retention._hold_count(oid), retention._hold_matches(bigint, anyelement),
    retention._consumer_pins(bigint), retention._consumer_positions(bigint), retention._live_batches(oid),
    retention._batch_quota(bigint, bigint, tid), retention._batch_bound(bigint, text)
    TO retention_admin;
-- An erasure's delete runs as its caller and counts the erased rows each active hold matches
-- (each evaluated as its placer): the hold collision.
GRANT EXECUTE ON FUNCTION retention._hold_matches(bigint, anyelement) TO retention_eraser;

-- pg_retention 0.4.0 -> 0.5.0, after the definitions (which create the trigger that keeps
-- retention.policy_counters): the entries written before it are counted by the function it
-- calls, 100,000 at a time.
DO $count$
DECLARE
    last bigint := 0;
    top bigint := (SELECT coalesce(max(id), 0) FROM retention.ledger_entries);
BEGIN
    WHILE last < top LOOP
        PERFORM retention._count_ledger(ARRAY(
            SELECT e FROM retention.ledger_entries e WHERE e.id > last AND e.id <= last + 100000 ORDER BY e.id));
        last := last + 100000;
    END LOOP;
END
$count$;
