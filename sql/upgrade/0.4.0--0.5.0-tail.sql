-- pg_retention 0.4.0 -> 0.5.0, after the definitions (which create the trigger that keeps
-- retention.policy_counters): the entries written before it are counted by the function it
-- calls, 100,000 at a time.
DO $count$
DECLARE
    last bigint := 0;
    top bigint := (SELECT coalesce(max(id), 0) FROM retention.ledger_entries);
BEGIN
    WHILE last < top LOOP
        PERFORM retention._count_ledger(ARRAY(
            SELECT e FROM retention.ledger_entries e WHERE e.id > last AND e.id <= last + 100000 ORDER BY e.id));
        last := last + 100000;
    END LOOP;
END
$count$;
