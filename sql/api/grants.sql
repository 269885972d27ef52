-- pg_retention SQL surface: privileges on everything the extension defines. Runs last in the
-- extension script (finalize), after every function it grants or revokes.

-- Privileges: nothing to PUBLIC; administrators get the public surface; the internals stay
-- with the owner except the run protocol, which run() (SECURITY INVOKER, it commits) calls:
-- it carries a token of a run kept in the backend, never a state the engine would trust.
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA retention FROM PUBLIC;
REVOKE ALL ON ALL PROCEDURES IN SCHEMA retention FROM PUBLIC;
GRANT EXECUTE ON FUNCTION retention.version() TO PUBLIC;
-- What the SECURITY INVOKER wrappers call: each internal to the roles of its wrapper.
GRANT EXECUTE ON FUNCTION retention._define_policy(text, jsonb),
    retention._lower_floor(text, int, text, text, text), retention._set_policy_state(text, text),
    retention._link_windows(text, text, text), retention._place_hold(oid, text, text, text, boolean),
    retention._lift_hold(bigint, text, text), retention._register_consumer(text, text, text, oid),
    retention._classify(oid, text, text), retention._prune(text, jsonb),
    retention._prune_archived(text, int),
    retention._unregister_consumer(text, text)
    TO retention_admin;
GRANT EXECUTE ON FUNCTION retention._report_position(text, text, bigint, text),
    retention._consumer_status(text, text)
    TO retention_admin, retention_consumer;
GRANT EXECUTE ON FUNCTION retention._claim_batch(text, int, text, text),
    retention._claim_slice(text, int, text, text, boolean),
    retention._claim_next(text, int, text, text, boolean),
    retention._extend_lease(text, text), retention._release_batch(text, text, text),
    retention._complete_batch(text, text, text, bigint, bigint, text),
    retention._prune_archived(text, int)
    TO retention_archiver;
GRANT EXECUTE ON FUNCTION retention._erase(oid, text, text, text, int) TO retention_eraser;
GRANT EXECUTE ON FUNCTION
    retention.add_policy(text, regclass, text, text, interval, text, text, text[], text, int, int, text, int, bigint, int, interval, interval, regclass, text[], text, text[], text, regclass, text, text, regclass, text, text, boolean, bigint, text[], text, boolean, interval),
    retention.alter_policy(text, text, text, interval, text, text, text[], text, int, int, text, int, bigint, int, interval, interval, regclass, text[], text, text[], text, regclass, text, text, regclass, text, text, boolean, bigint, text[], text, boolean, interval),
    retention.lower_floor(text, int, interval, text, text),
    retention.enable_policy(text), retention.disable_policy(text), retention.drop_policy(text),
    retention.link_windows(text, text, interval),
    retention.place_hold(regclass, text, text, text, boolean), retention.lift_hold(bigint, text, text),
    retention.classify(regclass, text, text), retention.prune(text, jsonb),
    retention.prune_archived(text, int),
    retention.candidates(text, int),
    retention.register_consumer(text, text, interval, regrole), retention.unregister_consumer(text, text),
    retention.preview(text), retention.preview_partitions(text),
    retention.replay_floor(text), retention.check_replay(text, timestamptz),
    retention._run_order(text), retention._lock_key(bigint),
    retention._run_begin(bigint), retention._run_advance(bigint), retention._run_progress(bigint),
    retention._run_end(bigint)
    TO retention_admin;
GRANT EXECUTE ON PROCEDURE retention.run(text) TO retention_admin;
GRANT EXECUTE ON FUNCTION retention.report_position(text, text, bigint, text),
    retention.consumer_status(text, text)
    TO retention_admin, retention_consumer;
GRANT EXECUTE ON FUNCTION retention.wake(), retention.health(), retention.keep_up(interval)
    TO retention_admin;
GRANT EXECUTE ON FUNCTION retention.claim_batch(text, int, interval, text), retention.claim_slice(text, int, interval, text, boolean),
    retention.claim_next(text, int, interval, text, boolean), retention.claimed_slice(uuid),
    retention.batch_manifest(uuid, boolean),
    retention.batch_frames(uuid), retention.batch_slice(uuid), retention.extend_lease(uuid, interval), retention.release_batch(uuid, text, text),
    retention.complete_batch(uuid, text, text, bigint, bigint, text), retention.archive_policies(),
    retention.prune_archived(text, int),
    retention.expiry_candidates(), retention.archive_holds(bigint, bytea, text[]),
    retention.expire_prepare(uuid, text, interval, bigint[], bigint, bigint, text, text),
    retention.expire_state(uuid), retention.expire_record(uuid, text, text[], jsonb, text),
    retention.archive_object_refs(), retention.ledger_orphan_objects(bigint, bigint, text[], text),
    retention.health(),
    retention.open_supersessions(int), retention.supersession_matches(bigint, bytea, text[]),
    retention.supersession_unaffected(bigint, text),
    retention.supersession_rewritten(bigint, text, text, text, bigint, bigint, text),
    retention.supersession_done(bigint, text), retention.archive_object_state(text),
    retention.archive_namespace(), retention.record_archive_verification(bigint, bigint, bigint, bigint)
    TO retention_archiver;
-- The database workers, when pg_retention.role names a member of retention_worker rather than
-- a superuser: their own steps and state, nothing else (a policy still runs as its owner).
GRANT EXECUTE ON FUNCTION retention._run_order(text), retention._lock_key(bigint),
    retention._worker_visit(),
    retention._worker_set(text, text), retention._worker_pause(text, text),
    retention._worker_visit_end(text, bigint[], float8), retention._worker_cycle_cap(bigint, text[]),
    retention._scrub_due(), retention._scrub_check(bigint, boolean)
    TO retention_worker;
-- Monitoring: retention.metrics() for pg_monitor (its members: postgres_exporter, sql_exporter),
-- retention_admin and the archiver (its /metrics).
GRANT EXECUTE ON FUNCTION retention.metrics() TO pg_monitor, retention_admin, retention_archiver;
-- Erasure outranks holds, so it has its own role (not granted to retention_admin).
GRANT EXECUTE ON FUNCTION retention.erase(regclass, text, text, text) TO retention_eraser;
GRANT EXECUTE ON PROCEDURE retention.erase_in_batches(regclass, text, text, text, int, bigint)
    TO retention_eraser;
-- One scrape of the archiver shows the whole system.
GRANT SELECT ON retention.stats TO retention_archiver;
-- The guard trigger needs no grant: PostgreSQL checks EXECUTE on a trigger function when the
-- trigger is made (by the extension's owner, guard.rs), not when it fires; it is SECURITY
-- DEFINER, and reads the catalog as the extension's owner.
-- What the statements that run as a policy's owner call (see pg_retention/src/author.rs).
GRANT EXECUTE ON FUNCTION retention._hold_count(oid), retention._hold_matches(bigint, anyelement),
    retention._consumer_pins(bigint), retention._consumer_positions(bigint), retention._live_batches(oid),
    retention._batch_quota(bigint, bigint, tid), retention._batch_bound(bigint, text)
    TO retention_admin;
-- An erasure's delete runs as its caller and counts the erased rows each active hold matches
-- (each evaluated as its placer): the hold collision.
GRANT EXECUTE ON FUNCTION retention._hold_matches(bigint, anyelement) TO retention_eraser;
