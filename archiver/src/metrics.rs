//! The archiver's metrics, typed (`prometheus-client`): every label set is a struct whose
//! values come from closed enums, or a policy name from the catalog — never keys, batch ids,
//! digests, actors or credentials. The database's own families (`retention.metrics()`, one set
//! of definitions for every deployment) are appended to the same exposition by
//! [`render_database`].

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry;
use std::fmt::Write;
use std::sync::atomic::AtomicU64;

/// What became of a batch.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub enum Outcome {
    /// Written, verified and pruned.
    Archived,
    /// The extension refused the prune.
    Refused,
    /// Released after a foreign occupant or a failed verification.
    Released,
    /// Any other failure.
    Failed,
}

/// Why an object-store operation failed.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub enum StoreReason {
    /// A request failed after its retries.
    Request,
    /// Another object was at a batch's key.
    ForeignOccupant,
}

/// A timed step of a batch.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub enum Stage {
    /// The claim, with the slice rendered.
    Claim,
    /// Writing the slice and manifest.
    Write,
    /// Reading both back.
    ReadBack,
    /// Checking what was read back.
    Verify,
    /// The prune.
    Prune,
}

/// What became of an erasure's supersession.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub enum Superseded {
    /// The slice was rewritten without the erased rows and the original deleted.
    Rewritten,
    /// No archived row matched (or the archive's objects had expired).
    Unaffected,
}

/// Label values in snake case, as the rest of the exposition spells them.
macro_rules! label_values {
    ($($ty:ty { $($variant:ident => $text:literal),* $(,)? })*) => {$(
        impl EncodeLabelValue for $ty {
            fn encode(&self, w: &mut LabelValueEncoder<'_>) -> Result<(), std::fmt::Error> {
                w.write_str(match self { $(<$ty>::$variant => $text),* })
            }
        }
    )*};
}

label_values! {
    Outcome { Archived => "archived", Refused => "refused", Released => "released", Failed => "failed" }
    StoreReason { Request => "request", ForeignOccupant => "foreign_occupant" }
    Stage { Claim => "claim", Write => "write", ReadBack => "read_back", Verify => "verify", Prune => "prune" }
    Superseded { Rewritten => "rewritten", Unaffected => "unaffected" }
}

/// A policy.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PolicyLabels {
    /// Its name.
    pub policy: String,
}

/// A policy and a batch outcome.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BatchLabels {
    /// The policy's name.
    pub policy: String,
    /// The outcome.
    pub outcome: Outcome,
}

/// A store failure's reason.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StoreLabels {
    /// The reason.
    pub reason: StoreReason,
}

/// A stage.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StageLabels {
    /// The stage.
    pub stage: Stage,
}

/// A supersession outcome.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SupersededLabels {
    /// The outcome.
    pub outcome: Superseded,
}

/// Every family the archiver itself exports.
pub struct Metrics {
    registry: Registry,
    /// Batches handled, by policy and outcome.
    pub batches: Family<BatchLabels, Counter>,
    /// Rows written to verified slices.
    pub rows_archived: Family<PolicyLabels, Counter>,
    /// Bytes of verified slices.
    pub bytes_archived: Family<PolicyLabels, Counter>,
    /// Rows the extension deleted after verification.
    pub rows_deleted: Family<PolicyLabels, Counter>,
    /// Slices or manifests that did not read back as written.
    pub verify_failures: Family<PolicyLabels, Counter>,
    /// Object-store operations that failed, by reason.
    pub store_failures: Family<StoreLabels, Counter>,
    /// Batches given up and left for a later attempt (`run`).
    pub batch_retries: Counter,
    /// Lease extensions of batches in progress.
    pub lease_extensions: Family<PolicyLabels, Counter>,
    /// Unix time of the last archived batch, by policy.
    pub last_success: Family<PolicyLabels, Gauge<f64, AtomicU64>>,
    /// Seconds each stage of a batch took.
    pub stage_seconds: Family<StageLabels, Histogram>,
    /// Supersessions finished, by outcome.
    pub supersessions: Family<SupersededLabels, Counter>,
    /// 1 when the start-up probe found the store refusing a second create of one key, 0 when
    /// it accepted it (the store overwrites), -1 until the probe has answered.
    pub store_create_only: Gauge,
}

/// Buckets from 5 ms to ~41 s.
fn stage_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.005, 2.0, 14))
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("pg_retention_archiver");
        let m = Metrics {
            batches: Family::default(),
            rows_archived: Family::default(),
            bytes_archived: Family::default(),
            rows_deleted: Family::default(),
            verify_failures: Family::default(),
            store_failures: Family::default(),
            batch_retries: Counter::default(),
            lease_extensions: Family::default(),
            last_success: Family::default(),
            stage_seconds: Family::new_with_constructor(stage_histogram),
            supersessions: Family::default(),
            store_create_only: Gauge::default(),
            registry: Registry::default(),
        };
        m.store_create_only.set(-1);
        registry.register(
            "batches",
            "Batches handled, by policy and outcome (archived, refused, released, failed)",
            m.batches.clone(),
        );
        registry.register(
            "rows_archived",
            "Rows written to verified slices",
            m.rows_archived.clone(),
        );
        registry.register(
            "bytes_archived",
            "Bytes of verified slices",
            m.bytes_archived.clone(),
        );
        registry.register(
            "rows_deleted",
            "Rows the extension deleted after verification",
            m.rows_deleted.clone(),
        );
        registry.register(
            "verify_failures",
            "Slices or manifests that did not read back as written",
            m.verify_failures.clone(),
        );
        registry.register(
            "store_failures",
            "Object-store operations that failed after their retries, by reason",
            m.store_failures.clone(),
        );
        registry.register(
            "batch_retries",
            "Batches given up and left for a later attempt after a failure",
            m.batch_retries.clone(),
        );
        registry.register(
            "lease_extensions",
            "Lease extensions of batches in progress",
            m.lease_extensions.clone(),
        );
        registry.register(
            "last_success_timestamp_seconds",
            "Unix time of the last archived batch",
            m.last_success.clone(),
        );
        registry.register(
            "stage_seconds",
            "Seconds a batch's stage took: claim, write, read_back, verify, prune",
            m.stage_seconds.clone(),
        );
        registry.register(
            "supersessions",
            "Erasure supersessions finished, by outcome (rewritten, unaffected)",
            m.supersessions.clone(),
        );
        registry.register(
            "store_create_only",
            "1 when the store refused a second create-only write of the start-up probe's key, 0 when it accepted it, -1 before the probe answered",
            m.store_create_only.clone(),
        );
        registry.register(
            "build",
            "The archiver's version",
            Info::new(vec![("version", env!("CARGO_PKG_VERSION"))]),
        );
        Metrics { registry, ..m }
    }
}

impl Metrics {
    /// The labels of `policy`.
    pub fn policy(policy: &str) -> PolicyLabels {
        PolicyLabels {
            policy: policy.to_owned(),
        }
    }

    /// Observes how long `stage` took.
    pub fn observe(&self, stage: Stage, seconds: f64) {
        self.stage_seconds
            .get_or_create(&StageLabels { stage })
            .observe(seconds);
    }

    /// The archiver's families in the OpenMetrics text format, without the closing `# EOF`
    /// (the database's families follow; [`finish`] closes the exposition).
    pub fn render(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode_registry(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}

/// The type of a database family, as `retention.metrics()` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SampleKind {
    /// `counter`: its samples are named with `_total`, its family without.
    Counter,
    /// `gauge`, and any type the exposition does not know.
    Gauge,
}

impl SampleKind {
    /// The type as the exposition spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            SampleKind::Counter => "counter",
            SampleKind::Gauge => "gauge",
        }
    }

    /// The kind `retention.metrics()` names `text`: a counter, or else a gauge.
    pub fn parse(text: &str) -> SampleKind {
        match text {
            "counter" => SampleKind::Counter,
            _ => SampleKind::Gauge,
        }
    }
}

/// One sample of `retention.metrics()`.
pub struct DbSample {
    /// Family name (a counter's ends in `_total`).
    pub name: String,
    /// Labels.
    pub labels: Vec<(String, String)>,
    /// Value.
    pub value: f64,
    /// Help text.
    pub help: String,
    /// Its family's type.
    pub kind: SampleKind,
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Appends the database's samples (in family order, as `retention.metrics()` returns them) in
/// the OpenMetrics text format: a counter's family is named without `_total`, its samples with.
pub fn render_database(out: &mut String, samples: &[DbSample]) {
    let mut family: Option<&str> = None;
    for s in samples {
        if family != Some(s.name.as_str()) {
            family = Some(&s.name);
            let base = match s.kind {
                SampleKind::Counter => s.name.strip_suffix("_total").unwrap_or(&s.name),
                SampleKind::Gauge => &s.name,
            };
            let _ = writeln!(out, "# HELP {base} {}", escape(&s.help));
            let _ = writeln!(out, "# TYPE {base} {}", s.kind.as_str());
        }
        let labels: Vec<String> = s
            .labels
            .iter()
            .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
            .collect();
        if labels.is_empty() {
            let _ = writeln!(out, "{} {}", s.name, s.value);
        } else {
            let _ = writeln!(out, "{}{{{}}} {}", s.name, labels.join(","), s.value);
        }
    }
}

/// Closes an exposition.
pub fn finish(out: &mut String) {
    out.push_str("# EOF\n");
}

/// The content type of the exposition.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exposition_is_openmetrics_with_the_database_families_after_ours() {
        let m = Metrics::default();
        m.batches
            .get_or_create(&BatchLabels {
                policy: "audit".into(),
                outcome: Outcome::Archived,
            })
            .inc_by(2);
        m.observe(Stage::Verify, 0.02);
        let mut text = m.render();
        render_database(
            &mut text,
            &[
                DbSample {
                    name: "pg_retention_policy_rows_deleted_total".into(),
                    labels: vec![("policy".into(), "au\"dit".into())],
                    value: 10.0,
                    help: "Rows deleted.".into(),
                    kind: SampleKind::Counter,
                },
                DbSample {
                    name: "pg_retention_build_info".into(),
                    labels: vec![("version".into(), "0.5.0".into())],
                    value: 1.0,
                    help: "Version.".into(),
                    kind: SampleKind::Gauge,
                },
            ],
        );
        finish(&mut text);
        assert!(text.contains(
            "pg_retention_archiver_batches_total{policy=\"audit\",outcome=\"archived\"} 2"
        ));
        assert!(text.contains("# TYPE pg_retention_policy_rows_deleted counter"));
        assert!(text.contains("pg_retention_policy_rows_deleted_total{policy=\"au\\\"dit\"} 10"));
        assert!(
            text.contains(
                "pg_retention_archiver_stage_seconds_bucket{le=\"0.04\",stage=\"verify\"} 1"
            ) || text.contains(
                "pg_retention_archiver_stage_seconds_bucket{stage=\"verify\",le=\"0.04\"} 1"
            ),
            "{text}"
        );
        assert!(text.contains("pg_retention_archiver_build_info{version="));
        assert_eq!(text.matches("# EOF").count(), 1);
        assert!(text.ends_with("# EOF\n"));
        let lines = text.lines().map(|l| Ok(l.to_owned()));
        let scrape = prometheus_parse::Scrape::parse(lines).expect("parses");
        assert!(scrape
            .samples
            .iter()
            .any(|s| s.metric == "pg_retention_policy_rows_deleted_total"));
    }
}
