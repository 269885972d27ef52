-- pg_retention SQL surface: the archive lifecycle. Archive expiry, and what the archiver's
-- sweep-orphans must keep and ledgers.

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

-- Ledgers the objects sweep-orphans deleted.
CREATE FUNCTION retention.ledger_orphan_objects(objects bigint, bytes bigint, keys text[], actor text)
RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
    SELECT retention._ledger_append('orphan_object_sweep', actor,
        jsonb_build_object('objects', objects, 'bytes', bytes, 'keys', to_jsonb(coalesce(keys, '{}'))), NULL)
$fn$;
