-- pg_retention bootstrap: runs first in the extension script.
-- The schema `retention` is created by CREATE EXTENSION from the control file (schema = retention);
-- everything the extension owns lives in it.
COMMENT ON SCHEMA retention IS 'pg_retention: policies, holds, ledger and sweeps';
