//! What the pipeline counts: archived batches and their rows, failed batches by outcome and
//! reason.

use crate::db::Release;
use crate::error::Error;
use crate::metrics::{BatchLabels, Metrics, Outcome, StoreLabels, StoreReason};
use std::time::{SystemTime, UNIX_EPOCH};

/// Counts an archived and pruned batch of `rows` rows and `bytes` bytes.
pub fn count_archived(m: &Metrics, policy: &str, rows: u64, bytes: u64, deleted: i64) {
    m.batches
        .get_or_create(&BatchLabels {
            policy: policy.to_owned(),
            outcome: Outcome::Archived,
        })
        .inc();
    let p = Metrics::policy(policy);
    m.rows_archived.get_or_create(&p).inc_by(rows);
    m.bytes_archived.get_or_create(&p).inc_by(bytes);
    m.rows_deleted
        .get_or_create(&p)
        .inc_by(deleted.max(0) as u64);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    m.last_success.get_or_create(&p).set(now);
}

/// The batch metric's outcome label for a batch that failed with `e`.
fn outcome(e: &Error) -> Outcome {
    match e {
        Error::Refused { .. } => Outcome::Refused,
        Error::ForeignOccupant { .. } | Error::Verify { .. } => Outcome::Released,
        _ => Outcome::Failed,
    }
}

/// Counts a failure of `e` in work for `policy` (a batch's, or a supersession's with no batch).
pub fn count_failure(m: &Metrics, policy: &str, e: &Error) {
    if let Error::Verify { .. } = e {
        m.verify_failures
            .get_or_create(&Metrics::policy(policy))
            .inc();
    }
    let store_reason = match e {
        Error::Store(_) => Some(StoreReason::Request),
        Error::ForeignOccupant { .. } => Some(StoreReason::ForeignOccupant),
        _ => None,
    };
    if let Some(reason) = store_reason {
        m.store_failures
            .get_or_create(&StoreLabels { reason })
            .inc();
    }
}

/// Counts a batch that failed with `e`.
pub fn count_batch_failure(m: &Metrics, policy: &str, e: &Error) {
    count_failure(m, policy, e);
    m.batches
        .get_or_create(&BatchLabels {
            policy: policy.to_owned(),
            outcome: outcome(e),
        })
        .inc();
}

/// Why a batch that failed with `e` is released (ledgered, and counted by its cause).
pub fn release_reason(e: &Error) -> Release {
    match e {
        Error::Refused { .. } => Release::Refused(e.to_string()),
        _ => Release::Failed(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(m: &Metrics, line_start: &str) -> Option<f64> {
        m.render()
            .lines()
            .find(|l| l.starts_with(line_start))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
    }

    #[test]
    fn failures_are_counted_by_outcome_and_reason() {
        let m = Metrics::default();
        let refused = Error::Refused {
            batch: "b".into(),
            reason: "rows changed".into(),
        };
        let foreign = Error::ForeignOccupant {
            key: "k".into(),
            reason: "other bytes".into(),
        };
        let verify = Error::Verify {
            key: "k".into(),
            reason: "digest".into(),
        };
        let io = Error::Io(std::io::Error::other("disk"));
        let request = Error::Store(object_store::Error::Generic {
            store: "S3",
            source: "503".into(),
        });
        for e in [&refused, &foreign, &verify, &io, &request] {
            count_batch_failure(&m, "p", e);
        }
        let batches = |o: &str| {
            sample(
                &m,
                &format!("pg_retention_archiver_batches_total{{policy=\"p\",outcome=\"{o}\"}}"),
            )
        };
        assert_eq!(batches("refused"), Some(1.0));
        assert_eq!(batches("released"), Some(2.0));
        assert_eq!(batches("failed"), Some(2.0));
        assert_eq!(
            sample(
                &m,
                "pg_retention_archiver_verify_failures_total{policy=\"p\"}"
            ),
            Some(1.0)
        );
        assert_eq!(
            sample(
                &m,
                "pg_retention_archiver_store_failures_total{reason=\"foreign_occupant\"}"
            ),
            Some(1.0)
        );
        assert_eq!(
            sample(
                &m,
                "pg_retention_archiver_store_failures_total{reason=\"request\"}"
            ),
            Some(1.0)
        );
        assert_eq!(
            release_reason(&refused),
            Release::Refused(refused.to_string())
        );
        assert_eq!(release_reason(&io), Release::Failed(io.to_string()));
    }

    #[test]
    fn an_archived_batch_counts_rows_bytes_deleted_and_its_time() {
        let m = Metrics::default();
        count_archived(&m, "p", 10, 1000, 7);
        count_archived(&m, "p", 5, 500, 5);
        assert_eq!(
            sample(
                &m,
                "pg_retention_archiver_batches_total{policy=\"p\",outcome=\"archived\"}"
            ),
            Some(2.0)
        );
        assert_eq!(
            sample(
                &m,
                "pg_retention_archiver_rows_archived_total{policy=\"p\"}"
            ),
            Some(15.0)
        );
        assert_eq!(
            sample(
                &m,
                "pg_retention_archiver_bytes_archived_total{policy=\"p\"}"
            ),
            Some(1500.0)
        );
        assert_eq!(
            sample(&m, "pg_retention_archiver_rows_deleted_total{policy=\"p\"}"),
            Some(12.0)
        );
        let at = sample(
            &m,
            "pg_retention_archiver_last_success_timestamp_seconds{policy=\"p\"}",
        )
        .unwrap();
        assert!(at > 1.7e9, "{at}");
    }
}
