-- pg_retention SQL surface: pull consumers and what they pin. Conventions: policies.sql.

-- Pull consumers (api/consumer.rs): a registration's epoch, reports of the position processed,
-- and what each pins.
CREATE FUNCTION retention.register_consumer(policy text, consumer text, lease interval,
                                            reporter regrole DEFAULT NULL) RETURNS bigint
LANGUAGE sql
AS $fn$ SELECT retention._register_consumer(policy, consumer, lease::text, reporter::oid) $fn$;

CREATE FUNCTION retention.report_position(policy text, consumer text, epoch bigint, "position" text)
RETURNS text
LANGUAGE sql
AS $fn$ SELECT retention._report_position(policy, consumer, epoch, $4) $fn$;

CREATE FUNCTION retention.unregister_consumer(policy text, consumer text) RETURNS void
LANGUAGE sql
AS $fn$ SELECT retention._unregister_consumer(policy, consumer) $fn$;

CREATE FUNCTION retention.consumer_status(policy text, consumer text)
RETURNS TABLE (epoch bigint, floor text, requires_bootstrap boolean, lease_expires_at timestamptz,
               pinning boolean)
LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $fn$
    SELECT r.epoch, r.floor, r.requires_bootstrap, r.lease_expires_at::timestamptz, r.pinning
      FROM retention._consumer_status(policy, consumer) r
$fn$;

-- What the live consumers of a policy pin, for the statements that delete (which run as the
-- policy's owner and read it once per statement): 'none' (no live consumer), 'all' (one has
-- not reported in its epoch yet), or 'floor' (rows from the lowest of _consumer_positions on stay).
CREATE FUNCTION retention._consumer_pins(policy_id bigint) RETURNS text
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
    SELECT CASE WHEN count(*) = 0 THEN 'none' WHEN bool_or(c.position IS NULL) THEN 'all' ELSE 'floor' END
      FROM retention.consumer_registrations c
     WHERE c.policy_id = _consumer_pins.policy_id AND c.expires_at > now()
$fn$;

-- The positions the live consumers of a policy reported, as text: the statements that delete
-- (which run as the policy's owner) cast them to the order column's type themselves, so a
-- domain's CHECK runs as that owner and the type comes from the catalog, not from a caller.
CREATE FUNCTION retention._consumer_positions(policy_id bigint) RETURNS SETOF text
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
    SELECT c.position FROM retention.consumer_registrations c
     WHERE c.policy_id = _consumer_positions.policy_id AND c.expires_at > now()
$fn$;

-- retention.replay_floor(policy) and retention.check_replay(policy, from_ts), the replay
-- boundary of a policy's window, are in Rust: src/api/replay.rs.
