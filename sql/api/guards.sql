-- pg_retention SQL surface: the guard triggers, C functions in Rust: enforced holds
-- (src/hold_guard.rs) and archive policies' eligible rows (src/guard.rs).

-- Triggers of enforced holds (api/hold.rs installs them): a row an enforced hold covers is not
-- updated or deleted, and a table with one is not truncated, by anyone but an erasure.
-- SECURITY DEFINER: they fire as whoever writes, who needs nothing of schema retention; each
-- hold's predicate runs as the role that placed it.
CREATE FUNCTION retention._hold_enforce() RETURNS trigger
LANGUAGE c SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'pg_retention_hold_enforce';

CREATE FUNCTION retention._hold_enforce_truncate() RETURNS trigger
LANGUAGE c SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'pg_retention_hold_enforce_truncate';

-- Guard trigger of archive policies (src/guard.rs): refuses (RT501) to update a row that is
-- already archive-eligible, but for the policy's mutable_columns. TG_ARGV[0] is the policy id,
-- TG_ARGV[1] its name. Eligibility is evaluated with the privileges of the policy's owner, not
-- of whoever updates the table. SECURITY DEFINER: a writer needs its table privileges and
-- nothing of schema retention (it fires as whoever updates; the predicate runs as its author).
-- The three triggers are C functions so that their refusals carry no procedural frame.
CREATE FUNCTION retention._fixpoint_guard() RETURNS trigger
LANGUAGE c SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'pg_retention_fixpoint_guard';
