-- Archive protocol catalog: claimed batches, their frozen key sets, and the archive index.

-- One row per claimed batch. claimed -> pruned, or -> released / expired. Never deleted.
CREATE TABLE retention.batches (
    id             uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    policy_id      bigint NOT NULL REFERENCES retention.policy_ids (id),
    policy_version integer NOT NULL,
    relation       oid NOT NULL,
    relation_name  text NOT NULL,
    state          text NOT NULL CHECK (state IN ('claimed', 'pruned', 'released', 'expired')),
    owner          text,
    rows           bigint NOT NULL,
    -- The batch's highest key: the next claim of the policy starts after it (see claim_batch).
    last_key       text[],
    claimed_at     timestamptz NOT NULL DEFAULT now(),
    lease_until    timestamptz NOT NULL,
    finished_at    timestamptz,
    finish_reason  text
);
CREATE INDEX batches_live ON retention.batches (policy_id) WHERE state = 'claimed';

-- The enumerated keys of live batches (text output of each primary-key column, in key order).
-- The primary key makes two live batches of one table disjoint. Rows go when the batch ends.
CREATE TABLE retention.batch_keys (
    relation oid NOT NULL,
    key      text[] NOT NULL,
    batch_id uuid NOT NULL REFERENCES retention.batches (id),
    PRIMARY KEY (relation, key)
);
CREATE INDEX batch_keys_batch ON retention.batch_keys (batch_id);

-- Every verified archive object whose rows were pruned. Never pruned, never changed.
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

CREATE VIEW retention.archives AS
SELECT a.id, a.batch, a.policy, a.policy_version, a.relation, a.object_key, a.blake3, a.rows,
       a.bytes, a.deleted, a.archived_at
FROM retention.archive_records a;

GRANT SELECT ON retention.archives TO retention_admin, retention_archiver;

SELECT pg_catalog.pg_extension_config_dump('retention.batches', '');
SELECT pg_catalog.pg_extension_config_dump('retention.batch_keys', '');
SELECT pg_catalog.pg_extension_config_dump('retention.archive_records', '');
