//! `retention.batches` and `retention.batch_keys`: archive batches, their states, their frozen
//! key sets and where their rows were when claimed; and `retention.archive_records`, the index
//! of verified archives a prune leaves behind.

use crate::catalog::{optional_one, query_json, Policy, RelationInfo};
use crate::error::{returned_nothing, Result, RetentionError};
use crate::tid::{self, Tid};
use pgrx::prelude::*;
use serde::Deserialize;

/// Text values as SQL `text[]` gives them (keys).
pub type Texts = Vec<Option<String>>;

/// A live batch's first and last key.
pub type KeyRange = (Texts, Texts);

/// Where an archive batch is in its life. `Claimed` is the only live state; an `Archived`
/// batch's rows are kept after their archive verified, and it keeps its key set for the
/// delete after `delete_after` (archive/deferred.rs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BatchState {
    /// Claimed under a lease; its rows belong to it.
    Claimed,
    /// Archived, verified and pruned.
    Pruned,
    /// Given up by its archiver; its rows are claimable again.
    Released,
    /// Its lease ran out; its rows are claimable again.
    Expired,
    /// Archived and verified, its rows kept (in `retention.archived_rows`).
    Archived,
}

impl BatchState {
    /// The state's name in `retention.batches.state`.
    pub fn as_str(self) -> &'static str {
        match self {
            BatchState::Claimed => "claimed",
            BatchState::Pruned => "pruned",
            BatchState::Released => "released",
            BatchState::Expired => "expired",
            BatchState::Archived => "archived",
        }
    }
}

impl std::fmt::Display for BatchState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A row of `retention.batches`.
#[derive(Debug, Deserialize)]
pub struct Batch {
    /// Batch id (a uuid).
    pub id: String,
    /// The policy that claimed it.
    pub policy_id: i64,
    /// The policy version that claimed it.
    pub policy_version: i32,
    /// The table's oid.
    pub relation: u32,
    /// The table's name at the claim.
    pub relation_name: String,
    /// Where it is in its life.
    pub state: BatchState,
    /// The archiver that claimed it, when it gave a name.
    pub owner: Option<String>,
    /// Rows claimed.
    pub rows: i64,
    /// Least age-column value claimed (text).
    pub age_min: Option<String>,
    /// Greatest age-column value claimed (text).
    pub age_max: Option<String>,
    /// When it was claimed (RFC 3339, UTC).
    pub claimed_at: String,
    /// The table's relfilenode when the rows were claimed (None for batches claimed before
    /// 0.4.0, which recorded no versions).
    pub relfilenode: Option<u32>,
    /// BLAKE3 (hex) of the slice the claim rendered.
    pub blake3: Option<String>,
    /// Bytes of that slice.
    pub bytes: Option<i64>,
}

/// What a claim froze of its rows, row by row in key order: each one's key, its place and the
/// transaction that wrote that version of it (`xmin`).
pub struct ClaimedRows {
    /// The keys, one after another (primary-key arity values each).
    pub keys: Texts,
    /// Where each row was.
    pub places: Vec<Tid>,
    /// Each row's `xmin`.
    pub xmins: Vec<i64>,
}

/// What a claim records about the batch it made.
pub struct NewBatch<'a> {
    /// The claiming policy.
    pub policy: &'a Policy,
    /// The table the rows are in: the policy's, or one leaf of it when it is partitioned.
    pub relation: &'a RelationInfo,
    /// The archiver's name, if it gave one.
    pub owner: Option<&'a str>,
    /// The claimed keys, one after another.
    pub keys: Texts,
    /// The primary key's arity.
    pub arity: usize,
    /// Where the claimed rows are.
    pub places: &'a [Tid],
    /// The `xmin` of each claimed row.
    pub xmins: &'a [i64],
    /// BLAKE3 (hex), rows and bytes of the slice rendered from them.
    pub slice: (String, u64, u64),
    /// Least and greatest age-column value claimed.
    pub age: (Option<String>, Option<String>),
    /// The lease, as interval text.
    pub lease: &'a str,
}

impl Batch {
    /// The batch `id`; with `lock`, locked until the transaction ends.
    pub fn load(id: &str, lock: bool) -> Result<Batch> {
        let sql = format!(
            "SELECT jsonb_build_object('id', b.id::text, 'policy_id', b.policy_id, 'policy_version', b.policy_version,
                    'relation', b.relation::bigint, 'relation_name', b.relation_name, 'state', b.state,
                    'owner', b.owner, 'rows', b.rows, 'age_min', b.age_min, 'age_max', b.age_max,
                    'claimed_at', to_char(b.claimed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'),
                    'relfilenode', b.relfilenode::bigint, 'blake3', b.blake3, 'bytes', b.bytes)
               FROM retention.batches b WHERE b.id = $1::uuid {}",
            if lock { "FOR UPDATE" } else { "" }
        );
        query_json(&sql, &[id.into()])?.ok_or_else(|| RetentionError::UnknownBatch(id.to_owned()))
    }

    /// Records a claimed batch and its frozen key set; returns its id and its rows.
    pub fn insert_claimed(new: NewBatch<'_>) -> Result<(String, i64)> {
        let arity = new.arity.max(1);
        let rows = (new.keys.len() / arity) as i64;
        let (Some(first_key), Some(last_key)) = (
            new.keys.get(..arity),
            new.keys.len().checked_sub(arity).map(|s| &new.keys[s..]),
        ) else {
            return Err(RetentionError::Internal("a claim without keys".into()));
        };
        let policy = new.policy;
        let (blake3, slice_rows, bytes) = new.slice;
        if slice_rows as i64 != rows
            || new.places.len() as i64 != rows
            || new.xmins.len() as i64 != rows
        {
            return Err(RetentionError::Internal(format!(
                "a claim of {rows} keys rendered {slice_rows} rows, {} places and {} versions",
                new.places.len(),
                new.xmins.len()
            )));
        }
        // The relfilenode is read under the lock the claim's read took (held until it commits):
        // the table cannot be rewritten in between.
        let batch = Spi::get_one_with_args::<String>(
            "INSERT INTO retention.batches (policy_id, policy_version, relation, relation_name, state, owner, rows,
                                            first_key, last_key, age_min, age_max, lease_until,
                                            relfilenode, blake3, bytes)
             VALUES ($1, $2, $3::bigint::oid, $4, 'claimed', $5, $6, $7, $8, $9, $10, now() + $11::interval,
                     pg_catalog.pg_relation_filenode($3::bigint::oid), $12, $13) RETURNING id::text",
            &[
                policy.id.into(),
                policy.version.into(),
                i64::from(new.relation.oid).into(),
                new.relation.qualified.as_str().into(),
                new.owner.into(),
                rows.into(),
                first_key.to_vec().into(),
                last_key.to_vec().into(),
                new.age.0.into(),
                new.age.1.into(),
                new.lease.into(),
                blake3.as_str().into(),
                (bytes as i64).into(),
            ],
        )?
        .ok_or_else(|| returned_nothing("batch insert"))?;
        Spi::run_with_args(
            "INSERT INTO retention.batch_keys (batch_id, keys, ctids, xmins) VALUES ($1::uuid, $2, $3, $4)",
            &[
                batch.as_str().into(),
                crate::arrays::texts(&new.keys)?,
                crate::arrays::tids(new.places)?,
                crate::arrays::int8s(new.xmins)?,
            ],
        )?;
        Ok((batch, rows))
    }

    /// What the claim of live batch `id` froze of its rows.
    pub fn claimed_rows(id: &str) -> Result<ClaimedRows> {
        type Tids = Vec<Option<pg_sys::ItemPointerData>>;
        let (keys, ctids, xmins) = Spi::connect(|client| {
            let table = client.select(
                "SELECT keys, ctids, xmins FROM retention.batch_keys WHERE batch_id = $1::uuid",
                Some(1),
                &[id.into()],
            )?;
            if table.is_empty() {
                return Ok::<_, pgrx::spi::SpiError>(None);
            }
            let (keys, ctids, xmins) =
                table.first().get_three::<Texts, Tids, Vec<Option<i64>>>()?;
            Ok(keys.zip(ctids).zip(xmins).map(|((k, c), x)| (k, c, x)))
        })?
        .ok_or_else(|| RetentionError::Internal(format!("claimed batch {id} has no key set")))?;
        let places = ctids
            .into_iter()
            .map(|t| t.map(tid::of))
            .collect::<Option<Vec<Tid>>>()
            .ok_or_else(|| RetentionError::Internal(format!("batch {id} has a NULL ctid")))?;
        let xmins = xmins
            .into_iter()
            .collect::<Option<Vec<i64>>>()
            .ok_or_else(|| RetentionError::Internal(format!("batch {id} has a NULL xmin")))?;
        Ok(ClaimedRows {
            keys,
            places,
            xmins,
        })
    }

    /// Ends the claimed batches of `policy_id` whose lease ran out; returns (id, rows) of each.
    pub fn expire_leases(policy_id: i64) -> Result<Vec<(String, i64)>> {
        query_json::<Vec<(String, i64)>>(
            "WITH e AS (
                 UPDATE retention.batches SET state = 'expired', finished_at = now(), finish_reason = 'lease expired'
                  WHERE policy_id = $1 AND state = 'claimed' AND lease_until < now()
              RETURNING id, rows),
             d AS (DELETE FROM retention.batch_keys k USING e WHERE k.batch_id = e.id)
             SELECT coalesce(jsonb_agg(jsonb_build_array(e.id::text, e.rows)), '[]') FROM e",
            &[policy_id.into()],
        )?
        .ok_or_else(|| returned_nothing("lease expiry"))
    }

    /// Gives `owner`'s oldest claimed batch of `policy_id` a new lease; its id, if it had one.
    pub fn resume(policy_id: i64, owner: &str, lease: &str) -> Result<Option<String>> {
        optional_one::<String, _>(
            "UPDATE retention.batches SET lease_until = now() + $3::interval
              WHERE id = (SELECT id FROM retention.batches
                           WHERE policy_id = $1 AND state = 'claimed' AND owner = $2
                           ORDER BY claimed_at LIMIT 1 FOR UPDATE SKIP LOCKED)
              RETURNING id::text",
            &[policy_id.into(), owner.into(), lease.into()],
        )
    }

    /// Where the next claim of `policy_id` in table `relation` starts: after the last key of
    /// its latest batch there, unless that batch was released or expired (its rows are to be
    /// claimed again first).
    pub fn watermark(policy_id: i64, relation: u32) -> Result<Option<Texts>> {
        optional_one::<Texts, _>(
            "SELECT CASE WHEN b.state IN ('claimed', 'pruned', 'archived') THEN b.last_key END
               FROM retention.batches b WHERE b.policy_id = $1 AND b.relation = $2::bigint::oid
              ORDER BY b.claimed_at DESC LIMIT 1",
            &[policy_id.into(), i64::from(relation).into()],
        )
    }

    /// Whether policy `policy_id` has a live batch in table `relation` that came back short of
    /// `max_rows` (it took every row claimable there when it was claimed).
    pub fn short_live(policy_id: i64, relation: u32, max_rows: i32) -> Result<bool> {
        Ok(optional_one::<bool, _>(
            "SELECT EXISTS (SELECT 1 FROM retention.batches b
                             WHERE b.policy_id = $1 AND b.relation = $2::bigint::oid
                               AND b.state = 'claimed' AND b.rows < $3)",
            &[
                policy_id.into(),
                i64::from(relation).into(),
                max_rows.into(),
            ],
        )? == Some(true))
    }

    /// First and last key of every live batch of the table (any policy) that ends after
    /// `after`, in key order: nobody else claims a row inside them while the batch lives. The
    /// keys are cast to the key's column types (a domain runs its CHECK there) as `owner`, the
    /// policy's owner, who reads the batches through `retention._live_batches`.
    pub fn live_ranges(
        rel: &RelationInfo,
        after: Option<&[Option<String>]>,
        owner: u32,
    ) -> Result<Vec<KeyRange>> {
        // Ordered by first key: the ranges are disjoint (a claim never spans a live batch).
        let sql = format!(
            "SELECT coalesce(jsonb_agg(jsonb_build_array(b.first_key, b.last_key) ORDER BY {first}), '[]')
               FROM retention._live_batches($1::bigint::oid) b
              WHERE $2::text[] IS NULL OR {ends_after}",
            first = rel.key_row("b.first_key")?,
            ends_after = rel.key_row_compare("b.last_key", ">", "$2::text[]")?,
        );
        let after: Option<Texts> = after.map(<[_]>::to_vec);
        crate::author::run_as(owner, || {
            query_json::<Vec<KeyRange>>(&sql, &[i64::from(rel.oid).into(), after.into()])?
                .ok_or_else(|| returned_nothing("live ranges"))
        })
    }

    /// Extends the lease of batch `id`; returns the new end of the lease.
    pub fn extend(id: &str, lease: &str) -> Result<String> {
        Spi::get_one_with_args::<String>(
            "UPDATE retention.batches SET lease_until = now() + $2::interval WHERE id = $1::uuid RETURNING lease_until::text",
            &[id.into(), lease.into()],
        )?
        .ok_or_else(|| RetentionError::UnknownBatch(id.to_owned()))
    }

    /// Marks batch `id` archived, its rows kept; its key set stays (the rows may be deleted
    /// later, after `delete_after`).
    pub fn archived(id: &str, reason: &str) -> Result<()> {
        Spi::run_with_args(
            "UPDATE retention.batches SET state = 'archived', finished_at = now(), finish_reason = $2
              WHERE id = $1::uuid",
            &[id.into(), reason.into()],
        )?;
        Ok(())
    }

    /// Up to `max` archived batches of `policy_id` with a row older than `window` (interval
    /// text) whose archive has not expired, oldest first, each locked (batches another
    /// transaction holds are skipped).
    pub fn archived_due(policy_id: i64, window: &str, max: i32) -> Result<Vec<String>> {
        query_json::<Vec<String>>(
            "SELECT coalesce(jsonb_agg(d.id ORDER BY d.claimed_at), '[]')
               FROM (SELECT b.id::text AS id, b.claimed_at FROM retention.batches b
                      WHERE b.policy_id = $1 AND b.state = 'archived'
                        AND b.age_min::timestamptz < now() - $2::interval
                        AND NOT EXISTS (SELECT 1 FROM retention.archive_records a
                                          JOIN retention.archive_expirations e ON e.archive_id = a.id
                                         WHERE a.batch = b.id)
                      ORDER BY b.claimed_at LIMIT $3
                        FOR UPDATE OF b SKIP LOCKED) d",
            &[policy_id.into(), window.into(), max.into()],
        )?
        .ok_or_else(|| returned_nothing("archived batches due"))
    }

    /// Keeps, of archived batch `id`'s key set, only `rows` (the rows still waiting for their
    /// delete).
    pub fn keep_only(id: &str, rows: &ClaimedRows) -> Result<()> {
        let count = i64::try_from(rows.places.len()).unwrap_or(i64::MAX);
        Spi::run_with_args(
            "UPDATE retention.batch_keys SET keys = $2, ctids = $3, xmins = $4 WHERE batch_id = $1::uuid",
            &[
                id.into(),
                crate::arrays::texts(&rows.keys)?,
                crate::arrays::tids(&rows.places)?,
                crate::arrays::int8s(&rows.xmins)?,
            ],
        )?;
        Spi::run_with_args(
            "UPDATE retention.batches SET rows = $2 WHERE id = $1::uuid",
            &[id.into(), count.into()],
        )?;
        Ok(())
    }

    /// The id of the archive record of batch `id`, if it was archived.
    pub fn archive_of(id: &str) -> Result<Option<i64>> {
        optional_one::<i64, _>(
            "SELECT a.id FROM retention.archive_records a WHERE a.batch = $1::uuid",
            &[id.into()],
        )
    }

    /// Ends batch `id` in `state` for `reason` and forgets its key set.
    pub fn finish(id: &str, state: BatchState, reason: &str) -> Result<()> {
        Spi::run_with_args(
            "UPDATE retention.batches SET state = $2, finished_at = now(), finish_reason = $3 WHERE id = $1::uuid",
            &[id.into(), state.as_str().into(), reason.into()],
        )?;
        Spi::run_with_args(
            "DELETE FROM retention.batch_keys WHERE batch_id = $1::uuid",
            &[id.into()],
        )?;
        Ok(())
    }
}

/// A verified archive, as a prune records it in `retention.archive_records`.
pub struct ArchiveRecord<'a> {
    /// The batch archived.
    pub batch: &'a str,
    /// Its policy.
    pub policy: &'a Policy,
    /// The policy version that claimed it.
    pub policy_version: i32,
    /// The table, qualified.
    pub relation: &'a str,
    /// Where the slice is.
    pub object_key: &'a str,
    /// The slice's BLAKE3 (hex).
    pub blake3: &'a str,
    /// Rows in the slice.
    pub rows: i64,
    /// Bytes in the slice.
    pub bytes: i64,
    /// Rows the prune deleted.
    pub deleted: i64,
}

impl ArchiveRecord<'_> {
    /// Appends the record; returns its id.
    pub fn append(&self) -> Result<i64> {
        Spi::get_one_with_args::<i64>(
            "INSERT INTO retention.archive_records (batch, policy, policy_version, relation, object_key, blake3, rows, bytes, deleted)
             VALUES ($1::uuid, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING id",
            &[
                self.batch.into(),
                self.policy.name.as_str().into(),
                self.policy_version.into(),
                self.relation.into(),
                self.object_key.into(),
                self.blake3.into(),
                self.rows.into(),
                self.bytes.into(),
                self.deleted.into(),
            ],
        )?
        .ok_or_else(|| returned_nothing("archive record insert"))
    }
}

/// An archive as recorded (its object now: a rewrite's once an erasure superseded the
/// original), with what checking its rows against holds needs.
#[derive(Debug, Clone, Deserialize)]
pub struct StoredArchive {
    /// Its policy's name.
    pub policy: String,
    /// The table (or leaf) its rows came from, as an oid; it may have been dropped since.
    pub relation: u32,
    /// Whether that table still exists.
    pub relation_exists: bool,
    /// The slice's BLAKE3 (hex), rows and bytes.
    pub blake3: String,
    /// Rows in the slice.
    pub rows: i64,
    /// Bytes in the slice.
    pub bytes: i64,
}

impl StoredArchive {
    /// Archive `id`, if recorded.
    pub fn by_id(id: i64) -> Result<Option<StoredArchive>> {
        query_json(
            "SELECT jsonb_build_object('policy', a.policy, 'relation', b.relation::oid::bigint,
                    'relation_exists', EXISTS (SELECT 1 FROM pg_catalog.pg_class c WHERE c.oid = b.relation::oid),
                    'blake3', a.blake3, 'rows', a.rows, 'bytes', a.bytes)
               FROM retention.archives a JOIN retention.batches b ON b.id = a.batch
              WHERE a.id = $1",
            &[id.into()],
        )
    }
}
