//! The lifecycle state rendered as OpenMetrics families (`pg_retention_archiver_lifecycle_*`),
//! every command's counters and refusal reasons present (0 until counted), the last-success
//! gauge once there was one.

use super::{Command, Reason, State};
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::fmt::Write;
use std::sync::atomic::AtomicU64;

impl EncodeLabelValue for Command {
    fn encode(&self, w: &mut LabelValueEncoder<'_>) -> Result<(), std::fmt::Error> {
        w.write_str(self.as_str())
    }
}

impl EncodeLabelValue for Reason {
    fn encode(&self, w: &mut LabelValueEncoder<'_>) -> Result<(), std::fmt::Error> {
        w.write_str(self.as_str())
    }
}

/// A command.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CommandLabels {
    command: Command,
}

/// A command and a refusal reason.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RefusalLabels {
    command: Command,
    reason: Reason,
}

type Counters = Family<CommandLabels, Counter>;

/// Appends the families of `state` to `out` (no `# EOF`: the exposition goes on).
pub fn render(out: &mut String, state: &State) {
    let mut registry = Registry::with_prefix("pg_retention_archiver_lifecycle");
    let planned_objects = Counters::default();
    let planned_bytes = Counters::default();
    let deleted_objects = Counters::default();
    let deleted_bytes = Counters::default();
    let partial = Counters::default();
    let refusals = Family::<RefusalLabels, Counter>::default();
    let last_success = Family::<CommandLabels, Gauge<f64, AtomicU64>>::default();
    for command in Command::ALL {
        let t = state.commands.get(&command).cloned().unwrap_or_default();
        let labels = CommandLabels { command };
        planned_objects
            .get_or_create(&labels)
            .inc_by(t.planned_objects);
        planned_bytes.get_or_create(&labels).inc_by(t.planned_bytes);
        deleted_objects
            .get_or_create(&labels)
            .inc_by(t.deleted_objects);
        deleted_bytes.get_or_create(&labels).inc_by(t.deleted_bytes);
        partial.get_or_create(&labels).inc_by(t.partial);
        for reason in command.reasons() {
            let n = t.refusals.get(reason).copied().unwrap_or_default();
            refusals
                .get_or_create(&RefusalLabels {
                    command,
                    reason: *reason,
                })
                .inc_by(n);
        }
        if let Some(at) = t.last_success_unixtime {
            last_success.get_or_create(&labels).set(at);
        }
    }
    registry.register(
        "planned_objects",
        "Objects planned for deletion: expire plans, sweep-orphans listings",
        planned_objects,
    );
    registry.register("planned_bytes", "Bytes planned for deletion", planned_bytes);
    registry.register(
        "deleted_objects",
        "Objects deleted by expire apply and sweep-orphans --apply",
        deleted_objects,
    );
    registry.register("deleted_bytes", "Bytes deleted", deleted_bytes);
    registry.register(
        "refusals",
        "Refusals, by command and reason (a closed set)",
        refusals,
    );
    registry.register(
        "partial",
        "Runs that stopped before finishing their deletes",
        partial,
    );
    registry.register(
        "last_success_timestamp_seconds",
        "Unix time of the last expire apply that completed, or sweep-orphans --apply that finished",
        last_success,
    );
    let mut text = String::new();
    if prometheus_client::encoding::text::encode_registry(&mut text, &registry).is_ok() {
        let _ = out.write_str(&text);
    }
}

#[cfg(test)]
mod tests {
    use super::super::{state, Tally};
    use super::*;

    #[test]
    fn every_command_and_its_reasons_are_exported_and_parse() {
        let dir =
            std::env::temp_dir().join(format!("pg-retention-exposition-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut t = Tally {
            planned_objects: 6,
            deleted_objects: 6,
            deleted_bytes: 1234,
            succeeded: true,
            ..Default::default()
        };
        t.refuse(Reason::NotReady);
        state::add(&dir, Command::Expire, &t, 1_700_000_000.5).unwrap();
        let mut text = String::new();
        render(&mut text, &state::read(&dir).unwrap());
        crate::metrics::finish(&mut text);
        for line in [
            "pg_retention_archiver_lifecycle_deleted_objects_total{command=\"expire\"} 6",
            "pg_retention_archiver_lifecycle_deleted_bytes_total{command=\"expire\"} 1234",
            "pg_retention_archiver_lifecycle_deleted_objects_total{command=\"sweep_orphans\"} 0",
            "pg_retention_archiver_lifecycle_refusals_total{command=\"expire\",reason=\"not_ready\"} 1",
            "pg_retention_archiver_lifecycle_refusals_total{command=\"sweep_orphans\",reason=\"referenced\"} 0",
            "pg_retention_archiver_lifecycle_partial_total{command=\"expire\"} 0",
            "pg_retention_archiver_lifecycle_last_success_timestamp_seconds{command=\"expire\"} 1700000000.5",
        ] {
            assert!(text.contains(line), "{line} not in\n{text}");
        }
        assert!(!text.contains("last_success_timestamp_seconds{command=\"sweep_orphans\"}"));
        assert!(
            !text.contains("command=\"sweep_orphans\",reason=\"not_ready\""),
            "a command exports only its own reasons"
        );
        let lines = text.lines().map(|l| Ok(l.to_owned()));
        let scrape = prometheus_parse::Scrape::parse(lines).expect("parses");
        assert!(scrape.samples.len() >= 20, "{}", scrape.samples.len());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
