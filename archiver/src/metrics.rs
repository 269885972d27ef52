//! Prometheus metrics and the /metrics + /healthz endpoint. Labels come from a closed set
//! (policy, outcome, reason): never keys, digests or credentials.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;

/// One metric family: name, type, help.
struct Family {
    name: &'static str,
    kind: &'static str,
    help: &'static str,
}

/// Every family the archiver exports.
const FAMILIES: &[Family] = &[
    Family {
        name: "pg_retention_archiver_batches_total",
        kind: "counter",
        help: "Batches handled, by policy and outcome (archived, refused, released, failed).",
    },
    Family {
        name: "pg_retention_archiver_rows_archived_total",
        kind: "counter",
        help: "Rows written to verified slices.",
    },
    Family {
        name: "pg_retention_archiver_bytes_archived_total",
        kind: "counter",
        help: "Bytes of verified slices.",
    },
    Family {
        name: "pg_retention_archiver_rows_deleted_total",
        kind: "counter",
        help: "Rows the extension deleted after verification.",
    },
    Family {
        name: "pg_retention_archiver_verify_failures_total",
        kind: "counter",
        help: "Slices or manifests that did not read back as written.",
    },
    Family {
        name: "pg_retention_archiver_store_failures_total",
        kind: "counter",
        help: "Object-store operations that failed after their retries, by reason.",
    },
    Family {
        name: "pg_retention_archiver_batch_retries_total",
        kind: "counter",
        help: "Batches given up and left for a later attempt after a failure.",
    },
    Family {
        name: "pg_retention_archiver_lease_extensions_total",
        kind: "counter",
        help: "Lease extensions of batches in progress.",
    },
    Family {
        name: "pg_retention_archiver_last_success_timestamp_seconds",
        kind: "gauge",
        help: "Unix time of the last archived batch.",
    },
    Family {
        name: "pg_retention_policy_rows_pruned_total",
        kind: "counter",
        help: "Rows pruned per policy, from retention.stats.",
    },
    Family {
        name: "pg_retention_policy_batches_total",
        kind: "counter",
        help: "Prune batches per policy, from retention.stats.",
    },
    Family {
        name: "pg_retention_policy_backlog_rows",
        kind: "gauge",
        help: "Deletable rows left after the last run, from retention.stats.",
    },
    Family {
        name: "pg_retention_policy_healthy",
        kind: "gauge",
        help: "1 when retention.health() reports the policy healthy.",
    },
];

type Labels = Vec<(&'static str, String)>;

/// The archiver's own figures.
#[derive(Default)]
pub struct Metrics {
    values: Mutex<BTreeMap<(&'static str, Labels), f64>>,
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

impl Metrics {
    /// Adds `by` to a counter.
    pub fn add(&self, name: &'static str, labels: &[(&'static str, &str)], by: f64) {
        let key = (
            name,
            labels.iter().map(|(k, v)| (*k, (*v).to_owned())).collect(),
        );
        if let Ok(mut m) = self.values.lock() {
            *m.entry(key).or_insert(0.0) += by;
        }
    }

    /// Sets a gauge.
    pub fn set(&self, name: &'static str, labels: &[(&'static str, &str)], value: f64) {
        let key = (
            name,
            labels.iter().map(|(k, v)| (*k, (*v).to_owned())).collect(),
        );
        if let Ok(mut m) = self.values.lock() {
            m.insert(key, value);
        }
    }

    /// The exposition text: our figures plus `extra` (name, labels, value) samples.
    pub fn render(&self, extra: &[(&'static str, Labels, f64)]) -> String {
        let mut samples: BTreeMap<&'static str, Vec<(Labels, f64)>> = BTreeMap::new();
        if let Ok(m) = self.values.lock() {
            for ((name, labels), v) in m.iter() {
                samples.entry(name).or_default().push((labels.clone(), *v));
            }
        }
        for (name, labels, v) in extra {
            samples.entry(name).or_default().push((labels.clone(), *v));
        }
        let mut out = String::new();
        for f in FAMILIES {
            let _ = writeln!(out, "# HELP {} {}", f.name, f.help);
            let _ = writeln!(out, "# TYPE {} {}", f.name, f.kind);
            for (labels, v) in samples.get(f.name).map(Vec::as_slice).unwrap_or_default() {
                let l: Vec<String> = labels
                    .iter()
                    .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
                    .collect();
                if l.is_empty() {
                    let _ = writeln!(out, "{} {v}", f.name);
                } else {
                    let _ = writeln!(out, "{}{{{}}} {v}", f.name, l.join(","));
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposition_parses_with_a_prometheus_text_parser() {
        let m = Metrics::default();
        m.add(
            "pg_retention_archiver_batches_total",
            &[("policy", "audit"), ("outcome", "archived")],
            2.0,
        );
        m.add(
            "pg_retention_archiver_rows_archived_total",
            &[("policy", "au\"dit")],
            10.0,
        );
        m.set(
            "pg_retention_archiver_last_success_timestamp_seconds",
            &[("policy", "audit")],
            1.7e9,
        );
        let text = m.render(&[(
            "pg_retention_policy_healthy",
            vec![("policy", "audit".into())],
            1.0,
        )]);
        let lines = text.lines().map(|l| Ok(l.to_owned()));
        let scrape = prometheus_parse::Scrape::parse(lines).unwrap();
        let batches = scrape
            .samples
            .iter()
            .find(|s| s.metric == "pg_retention_archiver_batches_total")
            .unwrap();
        assert_eq!(batches.labels.get("outcome"), Some("archived"));
        assert!(matches!(batches.value, prometheus_parse::Value::Counter(v) if v == 2.0));
        assert!(scrape
            .samples
            .iter()
            .any(|s| s.metric == "pg_retention_policy_healthy"));
        assert_eq!(scrape.docs.len(), FAMILIES.len());
    }
}
