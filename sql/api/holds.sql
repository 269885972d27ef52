-- pg_retention SQL surface: legal holds. Placing and lifting (api/hold.rs), and the hold fence
-- the delete statements read. Their enforcement triggers are in guards.sql. Conventions:
-- policies.sql.

CREATE FUNCTION retention.place_hold(relation regclass, predicate text, reason text, actor text,
                                     enforce boolean DEFAULT false)
RETURNS bigint
LANGUAGE sql
AS $fn$ SELECT retention._place_hold(relation::oid, predicate, reason, actor, enforce) $fn$;

CREATE FUNCTION retention.lift_hold(hold_id bigint, actor text, reason text) RETURNS void
LANGUAGE sql
AS $fn$ SELECT retention._lift_hold(hold_id, actor, reason) $fn$;

-- retention._below (a table and every partition under it) and retention._tree_of (the tables
-- that share rows with a table) are in Rust: src/catalog/tree.rs. So is retention._hold_count
-- (how many holds have ever reached a table's rows: the hold fence of the delete statements,
-- which run as a policy's owner and cannot read the catalog themselves): src/catalog/hold.rs.
