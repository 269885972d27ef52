-- Read-only views over the catalog. Granted to retention_admin only.

CREATE VIEW retention.policies AS
SELECT p.id, p.name, v.version, v.relation::regclass AS relation, v.kind, v.age_column,
       v.older_than, v.scope, v.terminal, v.group_by, v.order_by, v.keep, v.min_keep, v.action,
       v.batch_size, v.max_rows_per_run, v.enabled, v.changed_by, v.changed_at,
       v.owner::regrole AS owner, v.keep_floor, v.window_floor, v.archive_keep, v.lease_table,
       v.lease_key, v.lease_expiry
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
       v.lease_key, v.lease_expiry
FROM retention.policy_ids p
JOIN retention.policy_versions v ON v.policy_id = p.id;

CREATE VIEW retention.holds AS
SELECT h.id, h.relation_name AS relation, h.predicate, h.reason, h.actor, h.placed_at,
       h.placed_by::regrole AS placed_by, l.hold_id IS NULL AS active, l.lifted_at, l.actor AS lifted_by, l.reason AS lift_reason
FROM retention.hold_records h
LEFT JOIN retention.hold_lifts l ON l.hold_id = h.id;

CREATE VIEW retention.ledger AS
SELECT id, at, method, policy, policy_version, relation, rows, hold_ids, archive_id, actor,
       run_id, detail
FROM retention.ledger_entries;

-- Per current policy, figures derived from the ledger so they always add up with it.
CREATE VIEW retention.stats AS
SELECT p.name AS policy,
       coalesce(agg.rows_pruned_total, 0)::bigint AS rows_pruned_total,
       coalesce(agg.batches_total, 0)::bigint AS batches_total,
       agg.last_run_at,
       agg.last_success_at,
       CASE WHEN err.at IS NOT NULL AND (agg.last_success_at IS NULL OR err.at > agg.last_success_at)
            THEN err.message END AS last_error,
       coalesce(agg.skipped_locked, 0)::bigint AS skipped_locked,
       lastrun.backlog,
       coalesce(agg.partitions_dropped_total, 0)::bigint AS partitions_dropped_total,
       coalesce(agg.pauses_total, 0)::bigint AS pauses_total,
       coalesce(agg.paused_seconds_total, 0)::float8 AS paused_seconds_total
FROM retention.policies p
LEFT JOIN LATERAL (
    SELECT sum(l.rows) FILTER (WHERE l.method IN ('prune', 'orphan_sweep', 'drop_partition')) AS rows_pruned_total,
           count(*) FILTER (WHERE l.method IN ('prune', 'orphan_sweep')) AS batches_total,
           max(l.at) FILTER (WHERE l.method = 'run') AS last_run_at,
           max(l.at) FILTER (WHERE l.method = 'run' AND l.detail->>'outcome' = 'ok') AS last_success_at,
           count(*) FILTER (WHERE l.method = 'skip_locked') AS skipped_locked,
           count(*) FILTER (WHERE l.method = 'drop_partition') AS partitions_dropped_total,
           count(*) FILTER (WHERE l.method = 'pause') AS pauses_total,
           sum((l.detail->>'seconds')::float8) FILTER (WHERE l.method = 'pause') AS paused_seconds_total
    FROM retention.ledger_entries l WHERE l.policy_id = p.id
) agg ON true
LEFT JOIN LATERAL (
    SELECT l.at, l.detail->>'error' AS message FROM retention.ledger_entries l
    WHERE l.policy_id = p.id AND l.method = 'error' ORDER BY l.id DESC LIMIT 1
) err ON true
LEFT JOIN LATERAL (
    SELECT (l.detail->>'backlog')::bigint AS backlog FROM retention.ledger_entries l
    WHERE l.policy_id = p.id AND l.method = 'run' ORDER BY l.id DESC LIMIT 1
) lastrun ON true;

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

-- The background workers of this database, and whether each is running now.
CREATE VIEW retention.workers AS
SELECT w.database, w.pid, w.state, w.current_policy, w.started_at, w.last_cycle_start,
       w.last_cycle_end, w.next_wake, w.paused_since, w.pause_reason,
       EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity a
                WHERE a.pid = w.pid AND a.backend_type = 'pg_retention worker') AS running
FROM retention.worker_state w;
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
       c.reported_at
FROM retention.consumer_registrations c
JOIN retention.policy_ids p ON p.id = c.policy_id
WHERE p.dropped_at IS NULL;
GRANT SELECT ON retention.consumers TO retention_admin;
