-- The ledger's one writer for SQL callers (Rust appends through pg_retention/src/catalog/ledger.rs,
-- the same columns). With policy_id, an entry about that policy carrying its current name,
-- version and table, written only while the policy is live; without, an entry naming
-- policy_name (NULL: no policy), for the worker's own events.
CREATE FUNCTION retention._ledger_append(method text, actor text, detail jsonb, policy_id bigint,
                                         policy_name text DEFAULT NULL) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
    IF method IS NULL OR actor IS NULL THEN
        RAISE EXCEPTION 'a ledger entry needs a method and an actor' USING ERRCODE = '22004';
    END IF;
    IF policy_id IS NULL THEN
        INSERT INTO retention.ledger_entries (method, policy, rows, actor, detail)
        VALUES (method, policy_name, 0, actor, coalesce(detail, '{}'));
    ELSE
        INSERT INTO retention.ledger_entries (method, policy, policy_id, policy_version, relation, rows, actor, detail)
        SELECT method, p.name, p.id, p.version, p.relation::text, 0, actor, coalesce(detail, '{}')
          FROM retention.policies p WHERE p.id = _ledger_append.policy_id;
    END IF;
END
$fn$;
