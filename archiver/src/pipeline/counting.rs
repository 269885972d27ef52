//! What the pipeline counts: archived batches and their rows, failed batches by outcome and
//! reason.

use crate::error::Error;
use crate::metrics::Metrics;
use std::time::{SystemTime, UNIX_EPOCH};

/// Counts an archived and pruned batch.
pub fn count_archived(m: &Metrics, policy: &str, rows: u64, deleted: i64) {
    m.add(
        "pg_retention_archiver_batches_total",
        &[("policy", policy), ("outcome", "archived")],
        1.0,
    );
    m.add(
        "pg_retention_archiver_rows_archived_total",
        &[("policy", policy)],
        rows as f64,
    );
    m.add(
        "pg_retention_archiver_rows_deleted_total",
        &[("policy", policy)],
        deleted as f64,
    );
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    m.set(
        "pg_retention_archiver_last_success_timestamp_seconds",
        &[("policy", policy)],
        now,
    );
}

/// The batch metric's outcome label for a batch that failed with `e`.
fn outcome(e: &Error) -> &'static str {
    match e {
        Error::Refused { .. } => "refused",
        Error::ForeignOccupant { .. } | Error::Verify { .. } => "released",
        _ => "failed",
    }
}

/// Counts a batch that failed with `e`.
pub fn count_failure(m: &Metrics, policy: &str, e: &Error) {
    if let Error::Verify { .. } = e {
        m.add(
            "pg_retention_archiver_verify_failures_total",
            &[("policy", policy)],
            1.0,
        );
    }
    let store_reason = match e {
        Error::Store(_) => Some("request"),
        Error::ForeignOccupant { .. } => Some("foreign_occupant"),
        _ => None,
    };
    if let Some(reason) = store_reason {
        m.add(
            "pg_retention_archiver_store_failures_total",
            &[("reason", reason)],
            1.0,
        );
    }
    m.add(
        "pg_retention_archiver_batches_total",
        &[("policy", policy), ("outcome", outcome(e))],
        1.0,
    );
}

/// The reason a failed batch is released with: a refusal is the extension's own word.
pub fn release_reason(e: &Error) -> String {
    match e {
        Error::Refused { .. } => format!("refused: {e}"),
        _ => format!("archiver: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(m: &Metrics, line_start: &str) -> Option<f64> {
        m.render(&[])
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
            count_failure(&m, "p", e);
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
        assert!(release_reason(&refused).starts_with("refused: "));
        assert!(release_reason(&io).starts_with("archiver: "));
    }

    #[test]
    fn an_archived_batch_counts_rows_deleted_and_its_time() {
        let m = Metrics::default();
        count_archived(&m, "p", 10, 7);
        count_archived(&m, "p", 5, 5);
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
