//! Archivers (`pg-retention-archiver run`, as a role only in `retention_archiver`), each kept
//! running by a supervisor that starts it again whenever it exits: killed, aborted at an armed
//! fault point, or gone with the database.

use crate::world::{What, World};
use pg_retention_integration::archiver::Archiver;
use std::fs::OpenOptions;
use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// The fault points of the archive and supersession pipelines (archiver/src/fault.rs).
pub const FAULT_POINTS: [&str; 8] = [
    "after-claim",
    "mid-upload",
    "after-upload",
    "after-verify",
    "supersede-after-slice",
    "supersede-after-write",
    "supersede-after-record",
    "supersede-after-destroy",
];

/// One supervised archiver.
pub struct Slot {
    /// Its number (and owner name suffix).
    pub index: usize,
    /// Kill the running process now (SIGKILL).
    pub kill: AtomicBool,
    /// A fault point armed for its next start.
    pub arm: Mutex<Option<&'static str>>,
    /// Stop for good (the run's end).
    pub retire: AtomicBool,
}

impl Slot {
    /// A slot.
    pub fn new(index: usize) -> Slot {
        Slot {
            index,
            kill: AtomicBool::new(false),
            arm: Mutex::new(None),
            retire: AtomicBool::new(false),
        }
    }
}

/// Keeps slot `slot` running until it is retired; its output goes to `log_dir`.
pub fn supervise(world: &World, slot: &Slot, endpoint: &str, log_dir: &Path, program: &Path) {
    let log_path = log_dir.join(format!("archiver-{}.log", slot.index));
    while !slot.retire.load(Ordering::SeqCst) {
        let primary = world.primary();
        let armed = slot.arm.lock().ok().and_then(|mut a| a.take());
        let mut archiver = Archiver::on_s3(&primary.url_as("postgres", "archiver"), endpoint)
            .with_env("PG_RETENTION_BATCH_ROWS", "500")
            .with_env("PG_RETENTION_IDLE_SLEEP", "2s")
            .with_env("PG_RETENTION_MAX_RETRIES", "2")
            .with_env("PG_RETENTION_RETRY_TIMEOUT", "3s")
            .with_env(
                "PG_RETENTION_METRICS_ADDR",
                &format!(
                    "127.0.0.1:{}",
                    pg_retention_integration::ports::free_ports(1)[0]
                ),
            );
        archiver.owner = format!("chaos-archiver-{}", slot.index);
        archiver.program = Some(program.to_path_buf());
        if let Some(point) = armed {
            archiver = archiver.with_env("PG_RETENTION_ARCHIVER_FAULT", point);
        }
        let (out, err) = match (
            OpenOptions::new().create(true).append(true).open(&log_path),
            OpenOptions::new().create(true).append(true).open(&log_path),
        ) {
            (Ok(o), Ok(e)) => (Stdio::from(o), Stdio::from(e)),
            _ => (Stdio::null(), Stdio::null()),
        };
        let child = archiver.command(&["run"]).stdout(out).stderr(err).spawn();
        let Ok(mut child) = child else {
            std::thread::sleep(Duration::from_secs(1));
            continue;
        };
        let mut terminated: Option<std::time::Instant> = None;
        let status = loop {
            if slot.kill.swap(false, Ordering::SeqCst) {
                let _ = child.kill();
            }
            if slot.retire.load(Ordering::SeqCst) {
                // The run's end: a graceful stop (the batch in progress finishes), a kill if
                // that takes over a minute.
                match terminated {
                    None => {
                        let _ = std::process::Command::new("kill")
                            .args(["-TERM", &child.id().to_string()])
                            .status();
                        terminated = Some(std::time::Instant::now());
                    }
                    Some(t) if t.elapsed() > Duration::from_secs(60) => {
                        let _ = child.kill();
                    }
                    Some(_) => {}
                }
            }
            match child.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) => std::thread::sleep(Duration::from_millis(100)),
                Err(_) => break None,
            }
        };
        let text = format!(
            "archiver {} exited {}{}",
            slot.index,
            status.map_or("?".to_owned(), |s| s.to_string()),
            armed.map_or(String::new(), |p| format!(" (armed at {p})"))
        );
        world.event("archiver_exit", What::Fault, text);
        if !slot.retire.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(500));
        }
    }
}
