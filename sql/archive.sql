-- Archive protocol catalog: claimed batches, their frozen key sets, and the archive index.

-- One row per claimed batch. claimed -> pruned, or -> released / expired. Never deleted.
CREATE TABLE retention.batches (
    id             uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    policy_id      bigint NOT NULL REFERENCES retention.policy_ids (id),
    policy_version integer NOT NULL,
    relation       regclass NOT NULL,
    relation_name  text NOT NULL,
    state          text NOT NULL CHECK (state IN ('claimed', 'pruned', 'released', 'expired', 'archived')),
    owner          text,
    rows           bigint NOT NULL,
    -- The batch's lowest and highest key. A live batch's range is not claimed by anyone else,
    -- and the next claim of the policy starts after last_key (see claim_batch).
    first_key      text[],
    last_key       text[],
    -- Text output of the least and greatest age_column value among the rows when claimed.
    age_min        text,
    age_max        text,
    claimed_at     timestamptz NOT NULL DEFAULT now(),
    lease_until    timestamptz NOT NULL,
    finished_at    timestamptz,
    finish_reason  text,
    -- What the prune proves its deletes against (NULL for batches claimed before 0.4.0): the
    -- table's relfilenode when the rows were claimed (a rewrite gives it a new one), and the
    -- BLAKE3 and length of the slice the claim rendered from them.
    relfilenode    oid,
    blake3         text,
    bytes          bigint
);
CREATE INDEX batches_live ON retention.batches (policy_id) WHERE state = 'claimed';
CREATE INDEX batches_live_relation ON retention.batches (relation) WHERE state = 'claimed';
-- Every claim reads its policy's latest batch (where the claim starts). Batches are never
-- deleted, so without this the read scans all of them: 1.7 ms at 2,000 batches, and growing.
CREATE INDEX batches_latest ON retention.batches (policy_id, claimed_at);

-- The enumerated key set of each live batch: the text output of each primary-key column, key
-- after key in key order, in one array (one row per batch, not per key: claims and prunes
-- write one tuple), where each row was when claimed and the xmin of the version claimed (the
-- prune deletes a row only when it is that same version, at that place, with that key: see
-- docs/reliability.md). The row goes when the batch ends.
CREATE TABLE retention.batch_keys (
    batch_id uuid PRIMARY KEY REFERENCES retention.batches (id),
    keys     text[] NOT NULL,
    ctids    tid[] NOT NULL,
    xmins    bigint[] NOT NULL
);
-- Stored out of line but not compressed: every claim writes the row and every read-back reads
-- it, and compressing ~150 kB of short keys cost more than the bytes it saved (insert 7 -> 4 ms,
-- read 2.6 -> 0.7 ms for 10,000 keys).
ALTER TABLE retention.batch_keys ALTER COLUMN keys SET STORAGE EXTERNAL,
                                 ALTER COLUMN ctids SET STORAGE EXTERNAL,
                                 ALTER COLUMN xmins SET STORAGE EXTERNAL;

-- The rows archived and kept, per policy (an `archive` policy keeps them; a two-window
-- `archive_then_delete` one until `delete_after`): the text of each primary-key column, and
-- the batch whose verified archive holds them. A claim of the policy never takes them again
-- (archive/claim.rs): it runs as the policy's owner (a member of retention_admin), who reads
-- here the rows of the policies they own, and nothing else (row-level security); only the
-- extension writes (catalog/archived_rows.rs). A row's entry goes when the row is deleted, or changes and is to be
-- archived again.
CREATE TABLE retention.archived_rows (
    policy_id bigint NOT NULL REFERENCES retention.policy_ids (id),
    key       text[] NOT NULL,
    batch_id  uuid NOT NULL REFERENCES retention.batches (id),
    -- The policy's owner: whose claims read the entry.
    owner     regrole NOT NULL,
    PRIMARY KEY (policy_id, key)
);
CREATE INDEX archived_rows_batch ON retention.archived_rows (batch_id);
ALTER TABLE retention.archived_rows ENABLE ROW LEVEL SECURITY;
CREATE POLICY owner_reads ON retention.archived_rows FOR SELECT
    USING (owner = current_user::text::regrole);
GRANT SELECT ON retention.archived_rows TO retention_admin;

-- Every verified archive object: its rows pruned, or kept (deleted 0; see archived_rows).
-- Never pruned, never changed.
CREATE TABLE retention.archive_records (
    id            bigserial PRIMARY KEY,
    batch         uuid NOT NULL UNIQUE REFERENCES retention.batches (id),
    policy        text NOT NULL,
    policy_version integer NOT NULL,
    relation      text NOT NULL,
    object_key    text NOT NULL,
    blake3        text NOT NULL,
    rows          bigint NOT NULL,
    bytes         bigint NOT NULL,
    deleted       bigint NOT NULL,
    archived_at   timestamptz NOT NULL DEFAULT now()
);
CREATE TRIGGER append_only BEFORE UPDATE OR DELETE ON retention.archive_records
    FOR EACH ROW EXECUTE FUNCTION retention._refuse_change();
CREATE TRIGGER append_only_truncate BEFORE TRUNCATE ON retention.archive_records
    FOR EACH STATEMENT EXECUTE FUNCTION retention._refuse_change();

-- Archives whose objects an archiver's `expire apply` removed (past their policy's
-- archive_keep; see docs/archiver.md): the record stays, with the operation that expired it.
CREATE TABLE retention.archive_expirations (
    archive_id   bigint PRIMARY KEY REFERENCES retention.archive_records (id),
    operation_id uuid NOT NULL,
    expired_at   timestamptz NOT NULL DEFAULT now()
);
CREATE TRIGGER append_only BEFORE UPDATE OR DELETE ON retention.archive_expirations
    FOR EACH ROW EXECUTE FUNCTION retention._refuse_change();
CREATE TRIGGER append_only_truncate BEFORE TRUNCATE ON retention.archive_expirations
    FOR EACH STATEMENT EXECUTE FUNCTION retention._refuse_change();

-- The archiver's expire operations (docs/archiver.md), one row each, where each stands; written
-- only by catalog/expire_operation.rs (retention.expire_prepare makes the row and
-- retention.expire_record moves it at each apply). `prepared` until an apply deletes or refuses
-- (one before the quiescence interval ended, `not_ready`, changes nothing but `applies`);
-- `partial` when an apply deleted some planned keys (the next goes on with the rest);
-- `refused` when the last apply found the state changed since the plan (nothing more deleted;
-- another apply checks again, a new plan names the objects now); `completed` once every
-- planned key is deleted and the archives are marked expired (final). deleted_keys: every key
-- its applies deleted, each once. The ledger's expire_prepare and expire_apply entries are the
-- history; the state is read from here only.
CREATE TABLE retention.expire_operations (
    operation    uuid PRIMARY KEY,
    prepared_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    prepared_by  text NOT NULL CHECK (prepared_by <> ''),
    plan_sha256  text NOT NULL CHECK (plan_sha256 ~ '^[0-9a-f]{64}$'),
    quiescence   interval NOT NULL CHECK (quiescence >= interval '0'),
    archive_ids  bigint[] NOT NULL CHECK (cardinality(archive_ids) > 0),
    objects      bigint NOT NULL,
    bytes        bigint NOT NULL,
    tombstone    text NOT NULL,
    state        text NOT NULL DEFAULT 'prepared'
                 CHECK (state IN ('prepared', 'partial', 'refused', 'completed')),
    applies      bigint NOT NULL DEFAULT 0,
    deleted_keys text[] NOT NULL DEFAULT '{}',
    last_outcome text CHECK (last_outcome IN ('completed', 'partial', 'refused', 'not_ready')),
    updated_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    CHECK ((applies = 0) = (last_outcome IS NULL))
);

-- This database's archive namespace: the first segment of every object key it writes, so
-- databases sharing an object store never touch each other's objects (docs/archiver.md). One
-- row, written on first use (derived: `<system identifier>.<database>`) or by the operator
-- (retention.set_archive_namespace), and the result of the archiver's last `verify --all`
-- (retention._missing_archives). Not dumped: a restored database derives its own namespace
-- (its cluster's), and its recorded archives keep their keys.
CREATE TABLE retention.archive_namespace (
    singleton             boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    namespace             text NOT NULL CHECK (namespace ~ '^[A-Za-z0-9][A-Za-z0-9_.-]{0,199}$'),
    source                text NOT NULL CHECK (source IN ('derived', 'operator')),
    recorded_at           timestamptz NOT NULL DEFAULT now(),
    verified_at           timestamptz,
    verified_checked      bigint,
    verified_missing      bigint,
    verified_failed       bigint,
    verified_unreferenced bigint
);

-- Erasure reaches archived rows (retention.erase; docs/sql-reference.md): one row per archive
-- an erasure may have rows in. `pending` until an archiver has evaluated the erasure's predicate
-- over the archive's slice; then `unaffected` (no row matched, or the archive's objects had
-- expired), or `rewritten` (the slice without the matching rows is written under new keys, read
-- back, verified and recorded here: it is the archive's object from now on, while the objects
-- it replaces still exist) and `done` once those are deleted. An archive's supersessions run in
-- id order, each over the object the one before it left.
CREATE TABLE retention.supersessions (
    id            bigserial PRIMARY KEY,
    archive_id    bigint NOT NULL REFERENCES retention.archive_records (id),
    request_ref   text NOT NULL,
    relation      regclass NOT NULL,
    relation_name text NOT NULL,
    predicate     text NOT NULL,
    author        regrole NOT NULL,
    requested_at  timestamptz NOT NULL DEFAULT now(),
    state         text NOT NULL DEFAULT 'pending'
                  CHECK (state IN ('pending', 'unaffected', 'rewritten', 'done')),
    replaced_key  text,
    object_key    text,
    blake3        text,
    rows          bigint,
    bytes         bigint,
    erased        bigint,
    supersedes    text,
    rewritten_at  timestamptz,
    finished_at   timestamptz,
    reason        text,
    UNIQUE (archive_id, request_ref, predicate),
    CHECK (state IN ('pending', 'unaffected') OR (object_key IS NOT NULL AND replaced_key IS NOT NULL
           AND blake3 IS NOT NULL AND rows IS NOT NULL AND bytes IS NOT NULL AND supersedes IS NOT NULL))
);
CREATE INDEX supersessions_open ON retention.supersessions (archive_id, id)
    WHERE state IN ('pending', 'rewritten');
CREATE INDEX supersessions_request ON retention.supersessions (request_ref);

SELECT pg_catalog.pg_extension_config_dump('retention.batches', '');
SELECT pg_catalog.pg_extension_config_dump('retention.batch_keys', '');
SELECT pg_catalog.pg_extension_config_dump('retention.archived_rows', '');
SELECT pg_catalog.pg_extension_config_dump('retention.archive_records', '');
SELECT pg_catalog.pg_extension_config_dump('retention.archive_records_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('retention.archive_expirations', '');
SELECT pg_catalog.pg_extension_config_dump('retention.expire_operations', '');
SELECT pg_catalog.pg_extension_config_dump('retention.supersessions', '');
SELECT pg_catalog.pg_extension_config_dump('retention.supersessions_id_seq', '');
