-- Read-only views over the catalog. Granted to retention_admin only.

CREATE VIEW retention.policies AS
SELECT p.id, p.name, v.version, v.relation::regclass AS relation, v.kind, v.age_column,
       v.older_than, v.scope, v.terminal, v.group_by, v.order_by, v.keep, v.min_keep, v.action,
       v.batch_size, v.max_rows_per_run, v.enabled, v.changed_by, v.changed_at,
       v.owner::regrole AS owner, v.keep_floor, v.window_floor, v.archive_keep, v.lease_table,
       v.lease_key, v.lease_expiry, v.search_path,
       v.age_expression, v.age_table, v.age_table_column, v.age_pick,
       v.terminal_table, v.terminal_table_where, v.terminal_table_test, v.visible_rows_only,
       v.max_table_rows, v.mutable_columns, v.mutable_guard, v.record_keys, v.delete_after
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
       v.age_expression, v.age_table, v.age_table_column, v.age_pick,
       v.terminal_table, v.terminal_table_where, v.terminal_table_test, v.visible_rows_only,
       v.max_table_rows, v.mutable_columns, v.mutable_guard, v.record_keys, v.delete_after
FROM retention.policy_ids p
JOIN retention.policy_versions v ON v.policy_id = p.id;

CREATE VIEW retention.holds AS
SELECT h.id, h.relation_name AS relation, h.predicate, h.reason, h.actor, h.placed_at,
       h.placed_by::regrole AS placed_by, l.hold_id IS NULL AS active, l.lifted_at, l.actor AS lifted_by, l.reason AS lift_reason,
       h.enforced
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
-- Every table of the database outside the system's and the extension's schemas (partitions
-- when they have a class or a policy of their own): its declared retention class
-- (retention.classify; NULL when none), the class its policies give it (archive or delete;
-- NULL when none governs it) and the policies.
CREATE VIEW retention.tables AS
SELECT c.oid::regclass AS relation,
       CASE WHEN g.archive THEN 'archive' WHEN g.archive IS NOT NULL THEN 'delete' END AS class,
       coalesce(g.policies, '{}') AS policies,
       k.class AS retention_class, k.reason AS class_reason,
       k.classified_by::regrole AS classified_by, k.classified_at
FROM pg_catalog.pg_class c
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN LATERAL (SELECT t.class, t.reason, t.classified_by, t.classified_at
                     FROM retention.table_classes t WHERE t.relation = c.oid
                    ORDER BY t.id DESC LIMIT 1) k ON true
LEFT JOIN (SELECT p.relation::oid AS relid, bool_or(p.action IN ('archive_then_delete', 'archive')) AS archive,
                  array_agg(p.name ORDER BY p.name) AS policies
             FROM retention.policies p GROUP BY p.relation) g ON g.relid = c.oid
WHERE c.relkind IN ('r', 'p')
  AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'retention', 'pg_toast')
  AND n.nspname NOT LIKE 'pg\_temp\_%' AND n.nspname NOT LIKE 'pg\_toast\_temp\_%'
  AND (NOT c.relispartition OR k.class IS NOT NULL OR g.relid IS NOT NULL);

GRANT SELECT ON retention.policies, retention.policy_history, retention.holds, retention.ledger,
    retention.stats, retention.tables TO retention_admin;

-- Whether `pid` is a pg_retention worker: pg_stat_activity shows other roles' backend_type
-- only to members of pg_read_all_stats, so the view asks as the extension's owner.
CREATE FUNCTION retention._is_worker(pid integer) RETURNS boolean
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
-- archives whose slices were rewritten without the erased rows, the supersessions still
-- pending (an archiver has not processed them yet), and whether the erased row versions are
-- gone from the tables' pages (retention.erasure_scrubs: `unreadable_at` once none is left).
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
     GROUP BY 1),
d AS (
    SELECT k.request_ref, count(*) FILTER (WHERE k.unreadable_at IS NULL) AS scrubs_pending,
           CASE WHEN bool_and(k.unreadable_at IS NOT NULL) THEN max(k.unreadable_at) END AS unreadable_at
      FROM retention.erasure_scrubs k GROUP BY 1)
SELECT e.request_ref, e.tables, e.rows_erased,
       coalesce(s.archives_superseded, 0) AS archives_superseded,
       coalesce(s.archived_rows_erased, 0) AS archived_rows_erased,
       coalesce(s.archives_unaffected, 0) AS archives_unaffected,
       coalesce(s.pending, 0) AS pending,
       coalesce(c.held_by, '{}') AS hold_collisions,
       e.requested_at, e.erased_at,
       coalesce(d.scrubs_pending, 0) AS scrubs_pending, d.unreadable_at
FROM e
LEFT JOIN s ON s.request_ref = e.request_ref
LEFT JOIN c ON c.request_ref = e.request_ref
LEFT JOIN d ON d.request_ref = e.request_ref;

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
