-- pg_retention 0.1.0 -> 0.2.0 (ALTER EXTENSION pg_retention UPDATE TO '0.2.0').
--
-- Tables are changed in place, so every row is kept. Views and functions go first (views read
-- the columns whose types change); then every view and function of 0.2.0 is defined exactly as
-- a fresh install defines it (the part after the marker below is that install script's text,
-- minus the tables: scripts/assemble-upgrade), so an upgraded schema equals a fresh one
-- (tests/tests/upgrade.rs compares them in the catalog).
\echo Use "ALTER EXTENSION pg_retention UPDATE TO '0.2.0'" to load this file. \quit

DROP VIEW retention.workers, retention.stats, retention.ledger, retention.holds,
    retention.policy_history, retention.policies, retention.archives;

-- Every function and procedure goes and is defined again below, with its 0.2.0 signature,
-- body and grants; only the trigger functions stay (triggers on the catalog and, for
-- _fixpoint_guard, on governed tables depend on them) and are replaced in place.
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

-- Who a policy's predicates and deletes run as, and whose privileges a hold's predicate has:
-- 0.1.0 ran them all as the extension owner. An existing policy or hold is attributed to the
-- owner of its table (the extension owner for a table that is gone), the role that can read
-- every row of it anyway; re-register or alter it to make it run as someone else.
ALTER TABLE retention.policy_versions DISABLE TRIGGER append_only;
ALTER TABLE retention.policy_versions ADD COLUMN owner regrole;
UPDATE retention.policy_versions v
   SET owner = coalesce((SELECT c.relowner FROM pg_catalog.pg_class c WHERE c.oid = v.relation),
                        (SELECT e.extowner FROM pg_catalog.pg_extension e WHERE e.extname = 'pg_retention'));
ALTER TABLE retention.policy_versions ALTER COLUMN owner SET NOT NULL;
ALTER TABLE retention.policy_versions ENABLE TRIGGER append_only;

ALTER TABLE retention.hold_records DISABLE TRIGGER append_only;
ALTER TABLE retention.hold_records ADD COLUMN placed_by regrole;
UPDATE retention.hold_records h
   SET placed_by = coalesce((SELECT c.relowner FROM pg_catalog.pg_class c WHERE c.oid = h.relation),
                            (SELECT e.extowner FROM pg_catalog.pg_extension e WHERE e.extname = 'pg_retention'));
ALTER TABLE retention.hold_records ALTER COLUMN placed_by SET NOT NULL;
ALTER TABLE retention.hold_records ENABLE TRIGGER append_only;

-- Floors under keep / min_keep and older_than (none for existing policies).
ALTER TABLE retention.policy_versions ADD COLUMN keep_floor integer, ADD COLUMN window_floor interval;

-- Relations as regclass: a dump writes the name, a restore resolves it again (oid -> regclass
-- is binary-coercible: no table rewrite).
ALTER TABLE retention.policy_versions ALTER COLUMN relation TYPE regclass;
ALTER TABLE retention.hold_records ALTER COLUMN relation TYPE regclass;
ALTER TABLE retention.batches ALTER COLUMN relation TYPE regclass;

-- Sequences are dumped with the catalog, so ids after a restore do not collide.
SELECT pg_catalog.pg_extension_config_dump('retention.policy_ids_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('retention.hold_records_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('retention.ledger_entries_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('retention.archive_records_id_seq', '');

-- ---- 0.2.0 views and functions, as installed fresh ----
