-- pg_retention SQL surface: the archive protocol an archiver speaks (archive-then-prune):
-- claims, a batch's manifest and slice, leases, release and completion, and the deferred delete
-- of a two-window policy. Its tables are in sql/archive.sql. Conventions: policies.sql.

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
