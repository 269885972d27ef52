-- pg_retention 0.2.0 -> 0.3.0 (ALTER EXTENSION pg_retention UPDATE TO '0.3.0').
--
-- No table changes: 0.3.0 governs partitioned tables (retention._tree_of, holds and foreign
-- keys that reach a table through its partition tree), adds retention.preview_partitions and
-- the partitions_to_drop column of retention.preview. As for 0.2.0, every view and function
-- goes and is defined again below exactly as a fresh install defines it (scripts/assemble-upgrade),
-- so an upgraded schema equals a fresh one (tests/tests/upgrade.rs).
\echo Use "ALTER EXTENSION pg_retention UPDATE TO '0.3.0'" to load this file. \quit

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
