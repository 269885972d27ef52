//! `retention.metrics()`: every metric of the database, one row per sample (name, labels, value,
//! help, type). Every family is named and described here, once; the archiver's /metrics (also
//! in its metrics-only mode) and the exporter queries in deploy/ read this. Labels come from
//! closed sets (policy names, reasons, the database): never keys, batch ids, digests or actors.
//!
//! A scrape reads one row per policy (its running totals, `retention.policy_counters`, and its
//! kept table gauges, api/table_gauges.rs) and one row for the database, then emits the samples
//! in order — families by name, policies by name within each — so that nothing is sorted and
//! each policy's labels are built once however many families carry them.

use crate::api::metric_labels::Labels;
use crate::api::table_gauges::{self, Found, Kept};
use crate::error::{OrReport, Result, RetentionError};
use pgrx::prelude::*;

/// Failure reasons of `pg_retention_policy_errors_total`, in the order a policy's samples list
/// them (the keys of `retention.policy_counters.errors`).
const REASONS: [&str; 7] = [
    "privilege",
    "conflict",
    "invalid",
    "archive_refused",
    "archive_failed",
    "lease_expired",
    "other",
];

/// A policy's row as the scrape reads it.
struct PolicyRow {
    name: String,
    labels: Labels,
    archives: bool,
    enabled: bool,
    window_seconds: Option<f64>,
    rows_deleted: f64,
    rows_archived: f64,
    bytes_archived: f64,
    batches: f64,
    hold_skips: f64,
    reference_skips: f64,
    cap_hits: f64,
    partitions_dropped: f64,
    paused_seconds: f64,
    errors: [f64; REASONS.len()],
    /// Deletable rows left after the last run (delete policies).
    backlog: Option<f64>,
    last_success: Option<f64>,
    /// The kept table gauges (api/table_gauges.rs): the oldest deletable row's age in seconds
    /// (0 when none) and an archive policy's deletable rows; None when never measured.
    oldest_eligible_age: Option<f64>,
    eligible_rows: Option<f64>,
    /// Rows archived and kept (policies that keep them).
    archived_kept: Option<f64>,
}

/// The database's own samples.
struct DatabaseRow {
    name: String,
    version: String,
    worker_up: f64,
    last_cycle: Option<f64>,
    naptime_seconds: f64,
    supersessions_pending: f64,
    archives_missing: Option<f64>,
}

/// What a family's samples are.
enum Samples {
    /// One sample per policy (none where the function gives none), labelled by the policy.
    Policy(fn(&PolicyRow) -> Option<f64>),
    /// One sample per policy and failure reason.
    PolicyErrors,
    /// One sample for the database, with the labels [`Scope`] names.
    Database(Scope, fn(&DatabaseRow) -> Option<f64>),
}

/// The labels of a database-wide sample.
#[derive(Clone, Copy)]
enum Scope {
    None,
    Database,
    Version,
}

#[derive(Clone, Copy)]
enum Kind {
    Counter,
    Gauge,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
        }
    }
}

struct Family {
    name: &'static str,
    kind: Kind,
    help: &'static str,
    samples: Samples,
}

/// Every family, in name order (a test holds the order).
const FAMILIES: &[Family] = &[
    Family {
        name: "pg_retention_archives_missing",
        kind: Kind::Gauge,
        help: "Recorded, unexpired archives whose slice or manifest the last verify --all did not find or could not verify.",
        samples: Samples::Database(Scope::None, |d| d.archives_missing),
    },
    Family {
        name: "pg_retention_build_info",
        kind: Kind::Gauge,
        help: "The extension's version (always 1).",
        samples: Samples::Database(Scope::Version, |_| Some(1.0)),
    },
    Family {
        name: "pg_retention_erasure_supersessions_pending",
        kind: Kind::Gauge,
        help: "Archives an erasure still has to rewrite.",
        samples: Samples::Database(Scope::None, |d| Some(d.supersessions_pending)),
    },
    Family {
        name: "pg_retention_policy_archived_kept_rows",
        kind: Kind::Gauge,
        help: "Rows archived and kept (archive policies, and two-window ones until delete_after).",
        samples: Samples::Policy(|p| p.archived_kept),
    },
    Family {
        name: "pg_retention_policy_backlog_rows",
        kind: Kind::Gauge,
        help: "Deletable rows left: after the last run (delete policies), or now, counted up to 100000 (archive policies).",
        samples: Samples::Policy(|p| {
            if p.archives {
                p.eligible_rows
            } else {
                p.backlog
            }
        }),
    },
    Family {
        name: "pg_retention_policy_batches_total",
        kind: Kind::Counter,
        help: "Delete batches of the policy.",
        samples: Samples::Policy(|p| Some(p.batches)),
    },
    Family {
        name: "pg_retention_policy_bytes_archived_total",
        kind: Kind::Counter,
        help: "Bytes of the verified slices the policy's deletes rest on.",
        samples: Samples::Policy(|p| Some(p.bytes_archived)),
    },
    Family {
        name: "pg_retention_policy_cap_hits_total",
        kind: Kind::Counter,
        help: "Runs that stopped at their row cap with eligible rows left.",
        samples: Samples::Policy(|p| Some(p.cap_hits)),
    },
    Family {
        name: "pg_retention_policy_enabled",
        kind: Kind::Gauge,
        help: "1 when the policy is enabled.",
        samples: Samples::Policy(|p| Some(if p.enabled { 1.0 } else { 0.0 })),
    },
    Family {
        name: "pg_retention_policy_errors_total",
        kind: Kind::Counter,
        help: "Failed runs and batches, by reason.",
        samples: Samples::PolicyErrors,
    },
    Family {
        name: "pg_retention_policy_hold_skips_total",
        kind: Kind::Counter,
        help: "Eligible rows kept by holds when a run or prune met them.",
        samples: Samples::Policy(|p| Some(p.hold_skips)),
    },
    Family {
        name: "pg_retention_policy_last_success_timestamp_seconds",
        kind: Kind::Gauge,
        help: "Unix time of the last successful run or archived batch.",
        samples: Samples::Policy(|p| p.last_success),
    },
    Family {
        name: "pg_retention_policy_oldest_eligible_age_seconds",
        kind: Kind::Gauge,
        help: "Age of the oldest row the policy may delete now (0: none); beyond the window plus a grace, retention stalls.",
        samples: Samples::Policy(|p| p.oldest_eligible_age),
    },
    Family {
        name: "pg_retention_policy_partitions_dropped_total",
        kind: Kind::Counter,
        help: "Whole partitions dropped.",
        samples: Samples::Policy(|p| Some(p.partitions_dropped)),
    },
    Family {
        name: "pg_retention_policy_paused_seconds_total",
        kind: Kind::Counter,
        help: "Seconds sweeps waited (pacing: replicas, the WAL budget, adaptive pauses with their flush waits).",
        samples: Samples::Policy(|p| Some(p.paused_seconds)),
    },
    Family {
        name: "pg_retention_policy_reference_skips_total",
        kind: Kind::Counter,
        help: "Eligible rows runs left because rows referencing them through foreign keys keep them.",
        samples: Samples::Policy(|p| Some(p.reference_skips)),
    },
    Family {
        name: "pg_retention_policy_rows_archived_total",
        kind: Kind::Counter,
        help: "Rows in the policy's verified archives (deleted with them, or kept).",
        samples: Samples::Policy(|p| Some(p.rows_archived)),
    },
    Family {
        name: "pg_retention_policy_rows_deleted_total",
        kind: Kind::Counter,
        help: "Rows deleted by the policy (batches and whole partitions).",
        samples: Samples::Policy(|p| Some(p.rows_deleted)),
    },
    Family {
        name: "pg_retention_policy_window_seconds",
        kind: Kind::Gauge,
        help: "The policy's older_than, in seconds.",
        samples: Samples::Policy(|p| p.window_seconds),
    },
    Family {
        name: "pg_retention_worker_last_cycle_timestamp_seconds",
        kind: Kind::Gauge,
        help: "Unix time the worker last finished a cycle.",
        samples: Samples::Database(Scope::Database, |d| d.last_cycle),
    },
    Family {
        name: "pg_retention_worker_naptime_seconds",
        kind: Kind::Gauge,
        help: "pg_retention.naptime: the worker's time between cycles.",
        samples: Samples::Database(Scope::Database, |d| Some(d.naptime_seconds)),
    },
    Family {
        name: "pg_retention_worker_up",
        kind: Kind::Gauge,
        help: "1 while the database is served: the launcher runs, the database is listed, and it has not waited for a worker past two naptimes.",
        samples: Samples::Database(Scope::Database, |d| Some(d.worker_up)),
    },
];

type Sample = (&'static str, Labels, f64, &'static str, &'static str);

/// The running totals of a policy as the scrape reads them, in [`PolicyRow`]'s order, then its
/// failures by reason in [`REASONS`]' order.
const TOTALS: &str =
    "coalesce(c.rows_deleted, 0), coalesce(c.rows_archived, 0), coalesce(c.bytes_archived, 0),
                      coalesce(c.batches, 0), coalesce(c.hold_skips, 0), coalesce(c.cap_hits, 0),
                      coalesce(c.partitions_dropped, 0), coalesce(c.paused_seconds, 0),
                      coalesce(c.reference_skips, 0)";

fn policies() -> Result<Vec<PolicyRow>> {
    let reasons = REASONS
        .iter()
        .map(|r| format!("coalesce((c.errors->>'{r}')::float8, 0)"))
        .collect::<Vec<_>>()
        .join(", ");
    let rows = Spi::connect(|client| {
        client
            .select(
                &format!(
                    "SELECT p.id, p.name, p.action IN ('archive_then_delete', 'archive'), p.enabled,
                            p.enabled AND p.kind IN ('age', 'unreferenced', 'orphan')
                                AND (p.age_column IS NOT NULL OR p.age_expression IS NOT NULL OR p.age_table IS NOT NULL),
                            ARRAY[extract(epoch FROM p.older_than), c.backlog,
                                  extract(epoch FROM greatest(c.last_success_at, c.last_archive_at)),
                                  extract(epoch FROM clock_timestamp() - g.measured_at),
                                  extract(epoch FROM g.oldest_candidate), g.eligible_rows,
                                  extract(epoch FROM now()),
                                  CASE WHEN p.action = 'archive' OR p.delete_after IS NOT NULL
                                       THEN (SELECT count(*) FROM retention.archived_rows k
                                              WHERE k.policy_id = p.id) END]::float8[],
                            ARRAY[{TOTALS}, {reasons}]::float8[],
                            g.policy_id IS NOT NULL
                       FROM retention.policies p
                       LEFT JOIN retention.policy_counters c ON c.policy_id = p.id
                       LEFT JOIN retention.policy_gauges g ON g.policy_id = p.id
                      ORDER BY p.name"
                ),
                None,
                &[],
            )?
            .map(|row| {
                Ok((
                    row.get::<i64>(1)?.unwrap_or_default(),
                    row.get::<String>(2)?.unwrap_or_default(),
                    [
                        row.get::<bool>(3)?.unwrap_or(false),
                        row.get::<bool>(4)?.unwrap_or(false),
                        row.get::<bool>(5)?.unwrap_or(false),
                        row.get::<bool>(8)?.unwrap_or(false),
                    ],
                    row.get::<Vec<Option<f64>>>(6)?.unwrap_or_default(),
                    row.get::<Vec<f64>>(7)?.unwrap_or_default(),
                ))
            })
            .collect::<std::result::Result<Vec<_>, pgrx::spi::SpiError>>()
    })?;
    let at = |v: &[Option<f64>], i: usize| v.get(i).copied().flatten();
    let mut found: Vec<Found> = rows
        .iter()
        .map(|(id, _, [_, _, measurable, kept], figures, _)| Found {
            policy_id: *id,
            measurable: *measurable,
            kept: kept.then(|| Kept {
                oldest_candidate: at(figures, 4),
                eligible_rows: at(figures, 5).map(|n| n as i64),
            }),
            measured_ago: at(figures, 3),
        })
        .collect();
    table_gauges::refresh_stale(&mut found)?;
    rows.into_iter()
        .zip(found)
        .map(
            |((_, name, [archives, enabled, _, _], figures, totals), found)| {
                let total = |i: usize| totals.get(i).copied().unwrap_or(0.0);
                let mut errors = [0.0; REASONS.len()];
                for (i, e) in errors.iter_mut().enumerate() {
                    *e = total(9 + i);
                }
                let window_seconds = at(&figures, 0);
                let kept = found.kept.filter(|_| found.measurable);
                // The oldest candidate is deletable once older than the window (0: none).
                let oldest_eligible_age =
                    kept.map(
                        |k| match (at(&figures, 6), k.oldest_candidate, window_seconds) {
                            (Some(now), Some(oldest), Some(window)) if now - oldest > window => {
                                now - oldest
                            }
                            _ => 0.0,
                        },
                    );
                Ok(PolicyRow {
                    labels: Labels::of(&[("policy", &name)])?,
                    name,
                    archives,
                    enabled,
                    window_seconds,
                    rows_deleted: total(0),
                    rows_archived: total(1),
                    bytes_archived: total(2),
                    batches: total(3),
                    hold_skips: total(4),
                    cap_hits: total(5),
                    partitions_dropped: total(6),
                    paused_seconds: total(7),
                    reference_skips: total(8),
                    errors,
                    backlog: at(&figures, 1),
                    last_success: at(&figures, 2),
                    oldest_eligible_age,
                    eligible_rows: kept.and_then(|k| k.eligible_rows).map(|n| n as f64),
                    archived_kept: at(&figures, 7),
                })
            },
        )
        .collect()
}

fn database() -> Result<DatabaseRow> {
    Spi::connect(|client| {
        let row = client
            .select(
                "WITH w AS (SELECT * FROM retention.workers w WHERE w.database = current_database()),
                      n AS (SELECT coalesce(nullif(current_setting('pg_retention.naptime', true), ''), '1h')::interval AS naptime)
                 SELECT current_database()::text, retention.version(),
                        (EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.backend_type = 'pg_retention launcher')
                         AND coalesce(nullif(current_setting('pg_retention.enabled', true), ''), 'off')::boolean
                         AND retention._served()
                         AND coalesce((SELECT bool_and(w.running OR w.last_visit_end IS NULL
                                                       OR w.last_visit_end > clock_timestamp() - 2 * n.naptime)
                                         FROM w), true))::int::float8,
                        (SELECT max(extract(epoch FROM w.last_cycle_end))::float8 FROM w),
                        extract(epoch FROM n.naptime)::float8,
                        (SELECT count(*) FROM retention.supersessions s WHERE s.state IN ('pending', 'rewritten'))::float8,
                        retention._missing_archives()::float8
                   FROM n",
                None,
                &[],
            )?
            .first();
        Ok::<_, pgrx::spi::SpiError>(DatabaseRow {
            name: row.get::<String>(1)?.unwrap_or_default(),
            version: row.get::<String>(2)?.unwrap_or_default(),
            worker_up: row.get::<f64>(3)?.unwrap_or(0.0),
            last_cycle: row.get::<f64>(4)?,
            naptime_seconds: row.get::<f64>(5)?.unwrap_or(0.0),
            supersessions_pending: row.get::<f64>(6)?.unwrap_or(0.0),
            archives_missing: row.get::<f64>(7)?,
        })
    })
    .map_err(RetentionError::from)
}

fn samples() -> Result<Vec<Sample>> {
    let policies = policies()?;
    let db = database()?;
    let none = Labels::of(&[])?;
    let database = Labels::of(&[("database", &db.name)])?;
    let version = Labels::of(&[("version", &db.version)])?;
    // Built only when some policy exists: one label set per policy and reason.
    let mut error_labels = Vec::with_capacity(policies.len() * REASONS.len());
    for p in &policies {
        for reason in REASONS {
            error_labels.push(Labels::of(&[("policy", &p.name), ("reason", reason)])?);
        }
    }
    let mut out = Vec::with_capacity(policies.len() * FAMILIES.len() + error_labels.len());
    for f in FAMILIES {
        let kind = f.kind.as_str();
        match &f.samples {
            Samples::Policy(value) => out.extend(
                policies
                    .iter()
                    .filter_map(|p| value(p).map(|v| (f.name, p.labels, v, f.help, kind))),
            ),
            Samples::PolicyErrors => {
                for (p, labels) in policies.iter().zip(error_labels.chunks(REASONS.len())) {
                    out.extend(
                        labels
                            .iter()
                            .zip(p.errors)
                            .map(|(l, v)| (f.name, *l, v, f.help, kind)),
                    );
                }
            }
            Samples::Database(scope, value) => {
                let labels = match scope {
                    Scope::None => none,
                    Scope::Database => database,
                    Scope::Version => version,
                };
                out.extend(value(&db).map(|v| (f.name, labels, v, f.help, kind)));
            }
        }
    }
    Ok(out)
}

/// A family's name, help and type as text, built once for all its rows.
fn text(value: &str) -> pg_sys::Datum {
    // Safety: copies `value` into a palloc'd text of the current memory context.
    unsafe {
        pg_sys::Datum::from(pg_sys::cstring_to_text_with_len(
            value.as_ptr().cast(),
            value.len() as i32,
        ))
    }
}

/// The calling convention record of `retention.metrics()` (declared in sql/api/observability.sql).
static FINFO: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };

/// Calling convention of `retention.metrics()`.
#[unsafe(no_mangle)]
pub extern "C" fn pg_finfo_retention_metrics() -> &'static pg_sys::Pg_finfo_record {
    &FINFO
}

/// `retention.metrics()`: every metric of the database, one row per sample
/// (docs/observability.md). A set-returning function in materialize mode, written by hand
/// because it is called once per scrape: called once per row, as value-per-call functions are,
/// a SECURITY DEFINER function with a pinned search_path would set and restore its settings for
/// every one of its twenty thousand rows at a thousand policies.
#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn retention_metrics(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    crate::identity::refuse_restricted().or_report();
    let samples = samples().or_report();
    // Safety: called by the executor as a set-returning function of five columns (sql/api/observability.sql):
    // InitMaterializedSRF checks that materialize mode is allowed and sets up the tuple store
    // and its descriptor, which tuplestore_putvalues copies each row into.
    unsafe {
        pg_sys::InitMaterializedSRF(fcinfo, 0);
        let rsinfo = (*fcinfo).resultinfo.cast::<pg_sys::ReturnSetInfo>();
        let (store, desc) = ((*rsinfo).setResult, (*rsinfo).setDesc);
        let mut family = "";
        let mut texts = [pg_sys::Datum::from(0); 3];
        let mut nulls = [false; 5];
        for (name, labels, value, help, kind) in samples {
            if name != family {
                family = name;
                texts = [text(name), text(help), text(kind)];
            }
            let mut values = [
                texts[0],
                labels.0,
                value.into_datum().unwrap_or(pg_sys::Datum::from(0)),
                texts[1],
                texts[2],
            ];
            pg_sys::tuplestore_putvalues(store, desc, values.as_mut_ptr(), nulls.as_mut_ptr());
        }
    }
    pg_sys::Datum::from(0)
}

#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    use super::FAMILIES;
    use pgrx::prelude::*;

    #[pg_test]
    fn families_are_listed_in_name_order_once() {
        let names: Vec<&str> = FAMILIES.iter().map(|f| f.name).collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(names, sorted);
    }
}
