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
CREATE FUNCTION retention._refuse_change() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog AS $fn$
BEGIN
    RAISE EXCEPTION 'retention.% is append-only', TG_TABLE_NAME
        USING ERRCODE = 'RT401',
              DETAIL = format('%s on %I.%I was refused.', TG_OP, TG_TABLE_SCHEMA, TG_TABLE_NAME),
              HINT = 'Records of pg_retention are never changed or removed; append a new record instead (for holds: retention.lift_hold).';
END
$fn$;
