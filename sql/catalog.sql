-- pg_retention catalog: policies (append-only versions), window links, holds, the ledger.
-- Nothing here is granted to PUBLIC. The SQL functions that manage it are SECURITY DEFINER and
-- executable only by retention_admin (or retention_archiver for the archive protocol).

-- Roles are cluster-wide; they are created once and survive DROP EXTENSION.
DO $roles$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'retention_admin') THEN
        CREATE ROLE retention_admin NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'retention_archiver') THEN
        CREATE ROLE retention_archiver NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'retention_consumer') THEN
        CREATE ROLE retention_consumer NOLOGIN;
    END IF;
    -- Erasure outranks holds: not granted to retention_admin, whoever may erase is named.
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'retention_eraser') THEN
        CREATE ROLE retention_eraser NOLOGIN;
    END IF;
    -- The database workers may connect as a member of this role (pg_retention.role) instead of
    -- a superuser: it may call the worker's own steps and nothing else.
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'retention_worker') THEN
        CREATE ROLE retention_worker NOLOGIN;
    END IF;
END
$roles$;

REVOKE ALL ON SCHEMA retention FROM PUBLIC;
GRANT USAGE ON SCHEMA retention TO retention_admin, retention_archiver, retention_consumer, retention_eraser,
    retention_worker;
-- Monitoring roles call retention.metrics() (granted in sql/api/grants.sql), and nothing else here.
GRANT USAGE ON SCHEMA retention TO pg_monitor;

-- A policy's identity. Its definition lives in policy_versions; the newest version is current.
CREATE TABLE retention.policy_ids (
    id          bigserial PRIMARY KEY,
    name        text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    dropped_at  timestamptz
);
CREATE UNIQUE INDEX policy_ids_live_name ON retention.policy_ids (name) WHERE dropped_at IS NULL;

-- Every change to a policy is a new row; rows are never updated or deleted.
CREATE TABLE retention.policy_versions (
    policy_id        bigint NOT NULL REFERENCES retention.policy_ids (id),
    version          integer NOT NULL,
    -- regclass and regrole (not oid): a dump writes them as names and a restore resolves
    -- them again, so a policy finds its table (and its owner) in the restored database.
    relation         regclass NOT NULL,
    relation_name    text NOT NULL,
    kind             text NOT NULL CHECK (kind IN ('age', 'keep_latest', 'versions', 'entity', 'unreferenced', 'orphan')),
    age_column       text,
    older_than       interval,
    scope            text,
    terminal         text,
    group_by         text[],
    order_by         text,
    keep             integer,
    min_keep         integer,
    action           text NOT NULL CHECK (action IN ('delete', 'archive_then_delete', 'archive')),
    batch_size       integer NOT NULL,
    max_rows_per_run bigint NOT NULL,
    enabled          boolean NOT NULL,
    change           text NOT NULL CHECK (change IN ('add', 'alter', 'enable', 'disable', 'drop')),
    changed_by       text NOT NULL,
    changed_at       timestamptz NOT NULL DEFAULT now(),
    -- The role the policy's predicates and deletes run as: whoever registered or last altered
    -- it (enable, disable and drop keep it).
    owner            regrole NOT NULL,
    -- Floors: keep and min_keep never below keep_floor, older_than never below window_floor
    -- (what readers display must stay readable). Raised by add/alter, lowered only by
    -- retention.lower_floor, which ledgers who and why.
    keep_floor       integer,
    window_floor     interval,
    -- How long an archive policy's archives are kept after they were made (NULL: forever);
    -- older ones expire through the archiver's expire plan/prepare/apply.
    archive_keep     interval,
    -- orphan policies: the leases that own rows (table, this table's columns holding a lease's
    -- primary key, the lease table's column saying until when it lives).
    lease_table      regclass,
    lease_key        text[],
    lease_expiry     text,
    -- The search_path a delete policy's deletes run with (the table's own triggers resolve
    -- their unqualified names through it; pg_temp last). NULL: pg_catalog, pg_temp.
    search_path      text[],
    -- A clock other than age_column (engine/clock.rs): an expression over the row, or the
    -- newest/oldest value of a column of the rows of another table that reference it.
    age_expression   text,
    age_table        regclass,
    age_table_column text,
    age_pick         text CHECK (age_pick IN ('newest', 'oldest')),
    terminal_table       regclass,
    terminal_table_where text,
    terminal_table_test  text CHECK (terminal_table_test IN ('exists', 'not_exists')),
    visible_rows_only    boolean,
    max_table_rows       bigint CHECK (max_table_rows > 0),
    mutable_columns      text[],
    mutable_guard        text,
    record_keys          boolean,
    delete_after         interval,
    PRIMARY KEY (policy_id, version)
);

-- consumer.older_than >= producer.older_than + margin, enforced on every add/alter.
CREATE TABLE retention.window_links (
    producer_id bigint NOT NULL REFERENCES retention.policy_ids (id),
    consumer_id bigint NOT NULL REFERENCES retention.policy_ids (id),
    margin      interval NOT NULL,
    created_by  text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (producer_id, consumer_id),
    CHECK (producer_id <> consumer_id)
);

-- Legal holds: placing appends a hold, lifting appends a lift. Neither is ever changed.
CREATE TABLE retention.hold_records (
    id            bigserial PRIMARY KEY,
    relation      regclass NOT NULL,
    relation_name text NOT NULL,
    predicate     text NOT NULL,
    reason        text NOT NULL,
    actor         text NOT NULL,
    placed_at     timestamptz NOT NULL DEFAULT now(),
    -- The role that placed the hold: its predicate runs with this role's privileges.
    placed_by     regrole NOT NULL,
    -- Whether the hold also refuses every UPDATE, DELETE and TRUNCATE of its rows but an
    -- erasure's (triggers on the table: api/hold.rs), not only the product's own deletes.
    enforced      boolean NOT NULL DEFAULT false
);
CREATE TABLE retention.hold_lifts (
    hold_id   bigint PRIMARY KEY REFERENCES retention.hold_records (id),
    actor     text NOT NULL,
    reason    text NOT NULL,
    lifted_at timestamptz NOT NULL DEFAULT now()
);

-- Pull consumers of a stream table, registered on its policy: while a consumer's lease is live,
-- the policy deletes no row at or past its position (a value of the policy's order_by column,
-- kept as that type's text; NULL until the first report of the epoch: then every row stays).
-- Registering again starts a new epoch (from one sequence, so an epoch is never issued twice);
-- reports carry it, and those of an earlier epoch are refused. Unregistering deletes the row.
CREATE TABLE retention.consumer_registrations (
    policy_id     bigint NOT NULL REFERENCES retention.policy_ids (id),
    consumer      text NOT NULL CHECK (consumer <> ''),
    epoch         bigint NOT NULL,
    position      text,
    lease         interval NOT NULL CHECK (lease > interval '0'),
    expires_at    timestamptz NOT NULL,
    registered_at timestamptz NOT NULL DEFAULT now(),
    registered_by regrole NOT NULL,
    -- The role whose members may report positions and read the status: the consumer's own.
    reporter      regrole NOT NULL,
    reported_at   timestamptz,
    PRIMARY KEY (policy_id, consumer)
);
CREATE SEQUENCE retention.consumer_epochs;

-- The worker visits to this database: one row, about the last or current visit.
CREATE TABLE retention.worker_state (
    database          name PRIMARY KEY,
    pid               integer,
    state             text NOT NULL,
    current_policy    text,
    started_at        timestamptz,
    last_cycle_start  timestamptz,
    last_cycle_end    timestamptz,
    next_wake         timestamptz,
    wake_requested_at timestamptz,
    updated_at        timestamptz NOT NULL DEFAULT now(),
    -- While state = 'paused': since when the sweep of current_policy waits, and why
    -- (replica_lag, wal_rate).
    paused_since      timestamptz,
    pause_reason      text,
    -- When the last visit ended, and what it left of its cycle for the next (NULL: complete).
    last_visit_end    timestamptz,
    cycle_resume      bigint[]
);

-- The token bucket of pg_retention.max_wal_rate, one row per database (engine/pacing.rs):
-- state, not history, and not dumped.
CREATE TABLE retention.wal_budget (
    database    name PRIMARY KEY,
    tokens      double precision NOT NULL,
    refilled_at timestamptz NOT NULL
);

-- Leaves a sweep detached to retire whole and has not dropped yet (engine/retire.rs): written
-- in the transaction that detaches the leaf, deleted in the one that drops it, which follows
-- at once while the sweep holds a session lock on the leaf. A row left behind is a leaf whose
-- run was interrupted in between: the policy's next run attaches it again. State, not history,
-- and not dumped (its oids would not survive a restore).
CREATE TABLE retention.retiring_leaves (
    leaf        oid PRIMARY KEY,
    policy_id   bigint NOT NULL,
    owner       oid NOT NULL,
    run_id      uuid NOT NULL,
    parent      oid NOT NULL,
    qualified   text NOT NULL,
    bound       text NOT NULL,
    rows        bigint NOT NULL,
    proof       text NOT NULL,
    hold_ids    bigint[] NOT NULL DEFAULT '{}',
    hold_seen   bigint NOT NULL,
    detached_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- Erasures still to reach the disk (engine/scrub.rs): one row per table (leaf) an erasure
-- deleted rows from. A deleted row version stays in the table's pages, readable by tools that
-- read pages, until VACUUM removes it; the database worker checks each row's table for dead
-- versions older than `horizon` (the first transaction id after the erasure committed, taken
-- when the worker first sees it), runs VACUUM (INDEX_CLEANUP ON) when some are left and
-- removable, and stamps `unreadable_at` when none is left (a table not stored by the heap
-- access method cannot be checked: `unverifiable`). State, not history (the ledger's
-- `erasure_scrub` entries are the history), and not dumped: a restored table holds only live
-- rows, and its oids would not survive a restore.
CREATE TABLE retention.erasure_scrubs (
    id              bigserial PRIMARY KEY,
    request_ref     text NOT NULL,
    relation        oid NOT NULL,
    relation_name   text NOT NULL,
    erased          bigint NOT NULL,
    requested_at    timestamptz NOT NULL DEFAULT now(),
    horizon         xid8,
    checks          integer NOT NULL DEFAULT 0,
    vacuums         integer NOT NULL DEFAULT 0,
    checked_at      timestamptz,
    left_versions   bigint,
    status          text NOT NULL DEFAULT 'pending'
                    CHECK (status IN ('pending', 'waiting', 'left', 'unreadable', 'dropped', 'unverifiable')),
    unreadable_at   timestamptz,
    UNIQUE (request_ref, relation),
    CHECK ((status IN ('unreadable', 'dropped')) = (unreadable_at IS NOT NULL))
);
CREATE INDEX erasure_scrubs_open ON retention.erasure_scrubs (id) WHERE unreadable_at IS NULL;

-- The append-only ledger of every destructive action and every reason one did not happen.
CREATE TABLE retention.ledger_entries (
    id             bigserial PRIMARY KEY,
    at             timestamptz NOT NULL DEFAULT clock_timestamp(),
    method         text NOT NULL
        -- Every method there is: catalog/ledger.rs's LedgerMethod, which a test compares with it.
        CONSTRAINT ledger_entries_method CHECK (method IN (
        'prune', 'hold_skip', 'cap_reached', 'error', 'run', 'hold_place', 'hold_lift',
        'claim', 'archive', 'resume', 'release', 'lease_expired', 'lower_floor', 'drop_partition',
        'drop_skipped', 'orphan_sweep', 'consumer_register', 'consumer_unregister',
        'erasure', 'hold_collision', 'supersede', 'pause', 'reference_skip',
        'erasure_scrub', 'skip_locked', 'worker_crash', 'cycle_cap', 'expire_prepare',
        'expire_apply', 'orphan_object_sweep')),
    policy         text,
    policy_id      bigint,
    policy_version integer,
    relation       text,
    rows           bigint NOT NULL DEFAULT 0,
    hold_ids       bigint[] NOT NULL DEFAULT '{}',
    archive_id     bigint,
    actor          text NOT NULL,
    run_id         uuid,
    detail         jsonb NOT NULL DEFAULT '{}'
);
CREATE INDEX ledger_entries_policy ON retention.ledger_entries (policy_id, method, at);
-- An archive expire operation's history is found by its id (its state is
-- retention.expire_operations').
CREATE INDEX ledger_entries_expire_operation ON retention.ledger_entries ((detail->>'operation'))
    WHERE method IN ('expire_prepare', 'expire_apply');
-- An erasure request is found by its reference (retention.erasures).
CREATE INDEX ledger_entries_erasure_request ON retention.ledger_entries ((detail->>'request_ref'))
    WHERE method IN ('erasure', 'hold_collision', 'supersede');


-- Per policy, running totals of its ledger entries, kept in the transaction that appends each
-- one (retention._count_ledger and its trigger, ledger.sql). Derived from the ledger, so not dumped: a
-- restore of the ledger counts its entries again as they are loaded.
CREATE TABLE retention.policy_counters (
    policy_id          bigint PRIMARY KEY,
    rows_deleted       bigint NOT NULL DEFAULT 0,
    batches            bigint NOT NULL DEFAULT 0,
    rows_archived      bigint NOT NULL DEFAULT 0,
    bytes_archived     bigint NOT NULL DEFAULT 0,
    archives           bigint NOT NULL DEFAULT 0,
    hold_skips         bigint NOT NULL DEFAULT 0,
    reference_skips    bigint NOT NULL DEFAULT 0,
    cap_hits           bigint NOT NULL DEFAULT 0,
    partitions_dropped bigint NOT NULL DEFAULT 0,
    skipped_locked     bigint NOT NULL DEFAULT 0,
    pauses             bigint NOT NULL DEFAULT 0,
    paused_seconds     float8 NOT NULL DEFAULT 0,
    errors             jsonb NOT NULL DEFAULT '{}',
    last_run_at        timestamptz,
    last_outcome       text,
    last_success_at    timestamptz,
    last_archive_at    timestamptz,
    last_error_at      timestamptz,
    last_error         text,
    backlog            bigint
);
-- Per policy, what retention.metrics() reports of its table (api/metrics.rs), measured as the
-- policy's owner and kept so a scrape reads one row per policy instead of every table: the
-- age-column value of the oldest row the policy may delete now or once it is old enough (every
-- guard but the age bound), and an archive policy's deletable rows. Measured again at the end of
-- each run and by scrapes within a time budget (api/table_gauges.rs). State, not history: not
-- dumped.
CREATE TABLE retention.policy_gauges (
    policy_id        bigint PRIMARY KEY,
    oldest_candidate timestamptz,
    eligible_rows    bigint,
    measured_at      timestamptz NOT NULL
);

CREATE TRIGGER append_only BEFORE UPDATE OR DELETE ON retention.ledger_entries
    FOR EACH ROW EXECUTE FUNCTION retention._refuse_change();
CREATE TRIGGER append_only_truncate BEFORE TRUNCATE ON retention.ledger_entries
    FOR EACH STATEMENT EXECUTE FUNCTION retention._refuse_change();
CREATE TRIGGER append_only BEFORE UPDATE OR DELETE ON retention.hold_records
    FOR EACH ROW EXECUTE FUNCTION retention._refuse_change();
CREATE TRIGGER append_only_truncate BEFORE TRUNCATE ON retention.hold_records
    FOR EACH STATEMENT EXECUTE FUNCTION retention._refuse_change();
CREATE TRIGGER append_only BEFORE UPDATE OR DELETE ON retention.hold_lifts
    FOR EACH ROW EXECUTE FUNCTION retention._refuse_change();
CREATE TRIGGER append_only_truncate BEFORE TRUNCATE ON retention.hold_lifts
    FOR EACH STATEMENT EXECUTE FUNCTION retention._refuse_change();
CREATE TRIGGER append_only BEFORE UPDATE OR DELETE ON retention.policy_versions
    FOR EACH ROW EXECUTE FUNCTION retention._refuse_change();
CREATE TRIGGER append_only_truncate BEFORE TRUNCATE ON retention.policy_versions
    FOR EACH STATEMENT EXECUTE FUNCTION retention._refuse_change();

-- Catalog contents are user data: pg_dump keeps them.
SELECT pg_catalog.pg_extension_config_dump('retention.policy_ids', '');
SELECT pg_catalog.pg_extension_config_dump('retention.policy_versions', '');
SELECT pg_catalog.pg_extension_config_dump('retention.window_links', '');
SELECT pg_catalog.pg_extension_config_dump('retention.hold_records', '');
SELECT pg_catalog.pg_extension_config_dump('retention.hold_lifts', '');
SELECT pg_catalog.pg_extension_config_dump('retention.ledger_entries', '');
SELECT pg_catalog.pg_extension_config_dump('retention.consumer_registrations', '');
-- The sequences too, so ids after a restore continue where the dump left them.
SELECT pg_catalog.pg_extension_config_dump('retention.policy_ids_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('retention.hold_records_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('retention.ledger_entries_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('retention.consumer_epochs', '');

-- What each table's rows are for retention (catalog/class.rs): appended by
-- retention.classify, never changed; a table's newest record is its class.
CREATE TABLE retention.table_classes (
    id            bigserial PRIMARY KEY,
    relation      regclass NOT NULL,
    relation_name text NOT NULL,
    class         text NOT NULL CHECK (class IN ('source_of_truth', 'derived_rebuildable',
                                                 'operational_state', 'transport', 'audit')),
    reason        text NOT NULL,
    classified_by regrole NOT NULL,
    classified_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ON retention.table_classes (relation, id);
CREATE TRIGGER append_only BEFORE UPDATE OR DELETE ON retention.table_classes
    FOR EACH ROW EXECUTE FUNCTION retention._refuse_change();
CREATE TRIGGER append_only_truncate BEFORE TRUNCATE ON retention.table_classes
    FOR EACH STATEMENT EXECUTE FUNCTION retention._refuse_change();
SELECT pg_catalog.pg_extension_config_dump('retention.table_classes', '');
SELECT pg_catalog.pg_extension_config_dump('retention.table_classes_id_seq', '');
