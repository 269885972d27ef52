-- pg_retention 0.3.0 -> 0.4.0 (ALTER EXTENSION pg_retention UPDATE TO '0.4.0').
--
-- 0.4.0 proves an archive prune by row versions instead of rendering the rows a second time:
-- a claim records each row's xmin (retention.batch_keys.xmins), the table's relfilenode and
-- the slice's BLAKE3 and length (retention.batches), and claims take turns per table instead
-- of locking rows. Batches claimed by 0.3.0 recorded none of that, so the live ones end here
-- as expired (their rows become claimable again; nothing was deleted, and their objects are
-- never pruned against): stop the archivers before upgrading (docs/operations.md). As before,
-- every view and function goes and is defined again below exactly as a fresh install defines
-- it (scripts/assemble-upgrade), so an upgraded schema equals a fresh one (tests/tests/upgrade.rs).
\echo Use "ALTER EXTENSION pg_retention UPDATE TO '0.4.0'" to load this file. \quit

UPDATE retention.batches
   SET state = 'expired', finished_at = now(), finish_reason = 'claimed before 0.4.0; expired by the upgrade'
 WHERE state = 'claimed';
DELETE FROM retention.batch_keys;

ALTER TABLE retention.batches
    ADD COLUMN relfilenode oid,
    ADD COLUMN blake3 text,
    ADD COLUMN bytes bigint;
ALTER TABLE retention.batch_keys ADD COLUMN xmins bigint[] NOT NULL;
ALTER TABLE retention.batch_keys ALTER COLUMN xmins SET STORAGE EXTERNAL;

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
                AND p.proname NOT IN ('_refuse_change', '_fixpoint_guard')
    LOOP
        EXECUTE format('DROP %s %s', CASE f.prokind WHEN 'p' THEN 'PROCEDURE' ELSE 'FUNCTION' END, f.sig);
    END LOOP;
END
$drop$;
