-- pg_retention SQL surface: erasure (api/erasure.rs, engine/erase.rs) and archive
-- supersession (archive/supersede.rs; the archiver's archiver/src/supersede.rs). Conventions:
-- policies.sql.

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
