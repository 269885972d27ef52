//! The lifecycle state file: `lifecycle.json` in the `--state-dir`, the running totals of every
//! `expire` and `sweep-orphans` run that was given the directory. A run adds its tally under an
//! exclusive lock (`lifecycle.lock`, so two runs never lose each other's figures) and replaces
//! the file by a rename (so a scrape reads the old totals or the new, never half a file). No
//! extension change is needed for it; see `docs/observability.md` for why it is a file.

use super::{Command, Reason, Tally};
use crate::config::Settings;
use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

/// What the file says it is.
const FORMAT: &str = "pg_retention.lifecycle_metrics.v1";
/// The file.
const FILE: &str = "lifecycle.json";
/// The lock file beside it.
const LOCK: &str = "lifecycle.lock";

/// One command's running totals.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Totals {
    /// Objects planned.
    pub planned_objects: u64,
    /// Bytes planned.
    pub planned_bytes: u64,
    /// Objects deleted.
    pub deleted_objects: u64,
    /// Bytes deleted.
    pub deleted_bytes: u64,
    /// Refusals, by reason.
    pub refusals: BTreeMap<Reason, u64>,
    /// Runs that stopped before finishing.
    pub partial: u64,
    /// Unix time (seconds) of the last successful run.
    pub last_success_unixtime: Option<f64>,
}

impl Totals {
    fn add(&mut self, t: &Tally, now: f64) {
        self.planned_objects += t.planned_objects;
        self.planned_bytes += t.planned_bytes;
        self.deleted_objects += t.deleted_objects;
        self.deleted_bytes += t.deleted_bytes;
        for (reason, n) in &t.refusals {
            *self.refusals.entry(*reason).or_default() += n;
        }
        self.partial += u64::from(t.partial);
        if t.succeeded {
            self.last_success_unixtime = Some(now);
        }
    }
}

/// The whole file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct State {
    format: String,
    /// Per command.
    pub commands: BTreeMap<Command, Totals>,
}

impl Default for State {
    fn default() -> Self {
        State {
            format: FORMAT.into(),
            commands: BTreeMap::new(),
        }
    }
}

/// The state in `dir` (empty when there is no file yet).
pub fn read(dir: &Path) -> Result<State> {
    let path = dir.join(FILE);
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(State::default()),
        Err(e) => return Err(e.into()),
    };
    let state: State = serde_json::from_slice(&bytes)?;
    if state.format != FORMAT {
        return Err(Error::Refusal(format!(
            "{} is not a lifecycle state file ({FORMAT})",
            path.display()
        )));
    }
    Ok(state)
}

/// Adds `tally` to `command`'s totals in `dir`, at unix time `now`.
pub fn add(dir: &Path, command: Command, tally: &Tally, now: f64) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(LOCK))?;
    // Released when `lock` is dropped (or the process ends).
    lock.lock()?;
    let mut state = read(dir)?;
    state.commands.entry(command).or_default().add(tally, now);
    let tmp = dir.join(format!("{FILE}.{}.tmp", std::process::id()));
    let mut file = std::fs::File::create(&tmp)?;
    file.write_all(&serde_json::to_vec_pretty(&state)?)?;
    file.sync_all()?;
    std::fs::rename(&tmp, dir.join(FILE))?;
    Ok(())
}

/// Logs what a run of `command` did and, with a state directory, adds it to the totals there.
/// A failure to write them is a warning: the run's own outcome (its exit code) stands.
pub fn record(settings: &Settings, command: Command, tally: &Tally) {
    tracing::info!(
        command = command.as_str(),
        planned_objects = tally.planned_objects,
        planned_bytes = tally.planned_bytes,
        deleted_objects = tally.deleted_objects,
        deleted_bytes = tally.deleted_bytes,
        refusals = tally.refusals.values().sum::<u64>(),
        partial = tally.partial,
        succeeded = tally.succeeded,
        "archive lifecycle figures"
    );
    let Some(dir) = &settings.state_dir else {
        return;
    };
    let now = chrono::Utc::now().timestamp_millis() as f64 / 1000.0;
    if let Err(e) = add(dir, command, tally, now) {
        tracing::warn!(error = %e, dir = %dir.display(), "cannot record the archive lifecycle figures");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_add_up_and_a_missing_file_is_empty() {
        let dir = std::env::temp_dir().join(format!("pg-retention-state-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(read(&dir).unwrap(), State::default());
        let mut first = Tally {
            planned_objects: 6,
            planned_bytes: 600,
            ..Default::default()
        };
        first.refuse(Reason::Held);
        add(&dir, Command::Expire, &first, 10.0).unwrap();
        let second = Tally {
            deleted_objects: 4,
            deleted_bytes: 400,
            partial: true,
            ..Default::default()
        };
        add(&dir, Command::Expire, &second, 20.0).unwrap();
        let third = Tally {
            deleted_objects: 2,
            deleted_bytes: 200,
            succeeded: true,
            ..Default::default()
        };
        add(&dir, Command::Expire, &third, 30.0).unwrap();
        let state = read(&dir).unwrap();
        let e = &state.commands[&Command::Expire];
        assert_eq!(
            (
                e.planned_objects,
                e.planned_bytes,
                e.deleted_objects,
                e.deleted_bytes
            ),
            (6, 600, 6, 600)
        );
        assert_eq!(e.refusals[&Reason::Held], 1);
        assert_eq!(e.partial, 1);
        assert_eq!(e.last_success_unixtime, Some(30.0));
        assert!(!state.commands.contains_key(&Command::SweepOrphans));
        let names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(
            names.iter().all(|n| !n.ends_with(".tmp")),
            "no temporary file is left: {names:?}"
        );
        std::fs::write(dir.join(FILE), br#"{"format":"x","commands":{}}"#).unwrap();
        assert!(read(&dir).is_err(), "another file is refused");
        std::fs::write(
            dir.join(FILE),
            br#"{"format":"pg_retention.lifecycle_metrics.v1","commands":{"expire":{"refusals":{"a key":1}}}}"#,
        )
        .unwrap();
        assert!(
            read(&dir).is_err(),
            "a reason outside the closed set is refused"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
