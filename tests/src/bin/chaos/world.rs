//! What the run's threads share: the current primary, the store, the event log, the shadow of
//! what the application wrote, and the gates that order erasures and a switchover against the
//! writers.

use pg_retention_integration::{Cluster, Seaweed};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The two governed tables.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub enum Table {
    /// Delete class: an age policy swept by the worker, keys recorded in the ledger.
    Events,
    /// Archive class: archive_then_delete through the archivers.
    Audit,
}

impl Table {
    /// Both tables.
    pub const ALL: [Table; 2] = [Table::Events, Table::Audit];

    /// The table's (and its policy's) name.
    pub fn name(self) -> &'static str {
        match self {
            Table::Events => "events",
            Table::Audit => "audit",
        }
    }
}

/// Whether a write's effect is known: a connection lost before the answer leaves it unknown
/// (the commit may or may not have happened).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Outcome {
    /// The server answered: it happened.
    Done,
    /// The answer was lost.
    Unknown,
}

/// What the application did to one row.
#[derive(Clone, Debug)]
pub struct RowShadow {
    /// `subject` column (never changed).
    pub subject: i32,
    /// `created_at` in microseconds since the epoch (never changed).
    pub created_us: i64,
    /// Audit rows: inserted `open` (closed by their first update).
    pub initially_open: bool,
    /// The insert.
    pub insert: Outcome,
    /// Versions written after the insert (version 0), in order.
    pub updates: Vec<(i32, Outcome)>,
    /// The application's own DELETE, and when (wall clock, µs) it was sent.
    pub app_delete: Option<(Outcome, i64)>,
}

impl RowShadow {
    /// The versions the row may hold now: the last one known to be written and every later
    /// one whose answer was lost.
    pub fn possible_versions(&self) -> Vec<i32> {
        let mut out = vec![0];
        for (v, o) in &self.updates {
            if *o == Outcome::Done {
                out.clear();
            }
            out.push(*v);
        }
        out
    }

    /// Every version ever sent.
    pub fn any_version(&self, v: i32) -> bool {
        v == 0 || self.updates.iter().any(|(u, _)| *u == v)
    }
}

/// What happened, for the trace of a failure.
#[derive(Clone, Debug)]
pub enum What {
    /// A write of one row.
    Write(Table, i64),
    /// A hold placed or lifted on a subject.
    Hold(Table, i32),
    /// An erasure of a subject.
    Erase(i32),
    /// A policy change, a run, a wake.
    Policy,
    /// A consumer's registration or report.
    Consumer,
    /// A fault injected, or an archiver's exit.
    Fault,
}

/// One entry of the event log.
#[derive(Clone, Debug)]
pub struct Event {
    /// Wall clock, µs since the epoch.
    pub wall_us: i64,
    /// Kind and subject matter.
    pub what: What,
    /// Counter name for the summary.
    pub kind: &'static str,
    /// Human-readable line.
    pub text: String,
}

/// A hold as the driver saw it.
#[derive(Clone, Debug)]
pub struct HoldSeen {
    /// retention.holds id.
    pub id: i64,
    /// The table.
    pub table: Table,
    /// `subject = N`.
    pub subject: i32,
    /// Whether it refuses the application's writes too.
    pub enforced: bool,
    /// When place_hold had returned (committed by then).
    pub placed_us: i64,
    /// When lift_hold was sent (not in force for statements after that, at the earliest).
    pub lift_sent_us: Option<i64>,
}

/// A consumer registration as the driver saw it.
#[derive(Clone, Debug)]
pub struct ConsumerSeen {
    /// When register_consumer had returned.
    pub registered_us: i64,
    /// When unregister_consumer was sent.
    pub unregister_sent_us: Option<i64>,
    /// Reports sent: (wall clock when sent, position).
    pub reports: Vec<(i64, i64)>,
}

/// The run's shared state.
pub struct World {
    /// The seed.
    pub seed: u64,
    /// Start of the run.
    pub t0: Instant,
    /// The primary the application writes to (the promoted standby after a switchover).
    pub primary: RwLock<Arc<Cluster>>,
    /// The streaming standby, until it is promoted.
    pub standby: Mutex<Option<Arc<Cluster>>>,
    /// The old primary after a switchover (kept so its directory lives to the end).
    pub retired: Mutex<Vec<Arc<Cluster>>>,
    /// The S3 server.
    pub store: Mutex<Seaweed>,
    /// Writers and the driver hold it shared around each operation; a switchover holds it
    /// exclusively so that nothing is in flight while the primary changes.
    pub gate: RwLock<()>,
    /// Erased subjects. Writers hold it shared around each write; an erasure marks its subject
    /// holding it exclusively, so every row of the subject was committed before the erasure
    /// and none after.
    pub erased: RwLock<HashSet<i32>>,
    /// Time to stop.
    pub stop: AtomicBool,
    /// The event log.
    pub log: Mutex<Vec<Event>>,
    /// Every row the application wrote.
    pub shadow: Mutex<HashMap<(Table, i64), RowShadow>>,
    /// Holds placed.
    pub holds: Mutex<Vec<HoldSeen>>,
    /// Consumer registrations (of `events`, consumer `feed`).
    pub consumers: Mutex<Vec<ConsumerSeen>>,
    /// Erasures: subject → when erase was sent.
    pub erasures: Mutex<BTreeMap<i32, i64>>,
    /// Next row id (one sequence for both tables).
    pub next_id: AtomicI64,
    /// Counters for the summary.
    pub counts: Mutex<BTreeMap<&'static str, u64>>,
}

/// Whether a failed statement's outcome is unknown: operator intervention (a shutdown),
/// connection and internal errors may come after the commit, and no SQLSTATE means the
/// connection went. Any other SQLSTATE is the statement's own refusal.
pub fn outcome_unknown(e: &postgres::Error) -> bool {
    e.code().is_none_or(|c| {
        ["57", "08", "XX", "58"]
            .iter()
            .any(|p| c.code().starts_with(p))
    })
}

/// Wall clock in µs since the epoch.
pub fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or_default()
}

impl World {
    /// Records an event.
    pub fn event(&self, kind: &'static str, what: What, text: String) {
        self.count(kind, 1);
        if let Ok(mut log) = self.log.lock() {
            log.push(Event {
                wall_us: now_us(),
                what,
                kind,
                text,
            });
        }
    }

    /// Adds to a counter.
    pub fn count(&self, kind: &'static str, n: u64) {
        if let Ok(mut c) = self.counts.lock() {
            *c.entry(kind).or_default() += n;
        }
    }

    /// Whether the run is stopping.
    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// The current primary.
    pub fn primary(&self) -> Arc<Cluster> {
        match self.primary.read() {
            Ok(p) => p.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    /// A connection to the current primary as `role`, retried until it works or the run stops
    /// (the server may be down for a fault).
    pub fn connect(&self, role: &str) -> Option<postgres::Client> {
        loop {
            let url = self.primary().url_as("postgres", role);
            match postgres::Client::connect(&url, postgres::NoTls) {
                Ok(c) => return Some(c),
                Err(_) if self.stopping() => return None,
                Err(_) => std::thread::sleep(Duration::from_millis(200)),
            }
        }
    }

    /// Seconds since the start, for log lines.
    pub fn elapsed(&self) -> f64 {
        self.t0.elapsed().as_secs_f64()
    }
}
