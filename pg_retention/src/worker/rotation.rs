//! The launcher's schedule, apart from processes so it can be tested alone: when each served
//! database is next due, which ones a visit is under way in, and which waiting databases the
//! next free workers visit — the longest-waiting first, so a database whose visits keep being
//! cut short (a long backlog) goes behind every database that waited longer.

use super::board::Request;
use super::schedule::{jitter_offset, next_delay};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How soon a database listed by name is looked at again when it has no pg_retention yet
/// (CREATE EXTENSION may come any moment); with `'*'` it waits a naptime.
pub const EXTENSION_POLL: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, Copy)]
struct Entry {
    /// When the database is due for its next visit.
    due: Instant,
    /// Whether a visit is under way.
    visiting: bool,
    /// What was asked while a visit was under way, applied when it ends.
    pending: Option<Request>,
    /// When the last visit ended, and whether a request made the database due before its
    /// naptime since: a new naptime re-times only the wait a naptime set.
    last_end: Option<Instant>,
    asked: bool,
}

/// The timing settings the schedule applies.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    pub naptime: Duration,
    pub jitter: f64,
    /// Whether databases are listed by name (a missing extension is looked for again soon).
    pub listed: bool,
}

/// The schedule of every served database.
#[derive(Debug, Default)]
pub struct Rotation {
    entries: HashMap<String, Entry>,
}

impl Rotation {
    /// Serves exactly `wanted`: a new database is first due after its jitter offset; returns
    /// the databases no longer served (their visits are to be stopped).
    pub fn sync(&mut self, wanted: &[String], now: Instant, timing: Timing) -> Vec<String> {
        let gone: Vec<String> = self
            .entries
            .keys()
            .filter(|db| !wanted.contains(db))
            .cloned()
            .collect();
        for db in &gone {
            self.entries.remove(db);
        }
        for db in wanted {
            self.entries.entry(db.clone()).or_insert(Entry {
                due: now + jitter_offset(db, timing.naptime, timing.jitter),
                visiting: false,
                pending: None,
                last_end: None,
                asked: false,
            });
        }
        gone
    }

    /// Applies a request from the board: at once when no visit is under way, else when it ends.
    pub fn request(&mut self, db: &str, request: Request, now: Instant, timing: Timing) {
        let Some(entry) = self.entries.get_mut(db) else {
            return;
        };
        if entry.visiting {
            entry.pending = Some(request);
        } else {
            entry.due = due_after(request, entry.due, now, timing);
            entry.asked = true;
        }
    }

    /// The naptime or jitter changed: a wait under way for a naptime is measured with the new
    /// one from the end of the visit before it.
    pub fn retime(&mut self, timing: Timing) {
        for (db, entry) in &mut self.entries {
            if let (false, false, Some(end)) = (entry.visiting, entry.asked, entry.last_end) {
                entry.due = end + next_delay(db, timing.naptime, timing.jitter);
            }
        }
    }

    /// A visit to `db` started.
    pub fn started(&mut self, db: &str) {
        if let Some(entry) = self.entries.get_mut(db) {
            entry.visiting = true;
        }
    }

    /// The visit to `db` ended: due again a naptime (plus its offset) from now, or sooner when
    /// something was asked meanwhile.
    pub fn ended(&mut self, db: &str, now: Instant, timing: Timing) {
        let Some(entry) = self.entries.get_mut(db) else {
            return;
        };
        entry.visiting = false;
        entry.last_end = Some(now);
        let after_naptime = now + next_delay(db, timing.naptime, timing.jitter);
        entry.asked = entry.pending.is_some();
        entry.due = match entry.pending.take() {
            Some(request) => due_after(request, after_naptime, now, timing),
            None => after_naptime,
        };
    }

    /// Up to `free` databases to visit now: due, no visit under way, longest waiting first.
    pub fn next(&self, now: Instant, free: usize) -> Vec<String> {
        let mut due: Vec<(&String, Instant)> = self
            .entries
            .iter()
            .filter(|(_, e)| !e.visiting && e.due <= now)
            .map(|(db, e)| (db, e.due))
            .collect();
        due.sort_by(|a, b| a.1.cmp(&b.1).then_with(|| a.0.cmp(b.0)));
        due.into_iter()
            .take(free)
            .map(|(db, _)| db.clone())
            .collect()
    }
}

/// When a database is due after `request`, given when it was due otherwise.
fn due_after(request: Request, otherwise: Instant, now: Instant, timing: Timing) -> Instant {
    match request {
        // Behind every database already waiting (they were due earlier than now).
        Request::Wake | Request::Unfinished => otherwise.min(now),
        Request::NoExtension if timing.listed => now + EXTENSION_POLL.min(timing.naptime),
        Request::NoExtension => now + timing.naptime,
    }
}

#[cfg(any(test, feature = "pg_test"))]
#[pgrx::pg_schema]
mod tests {
    use super::*;
    use pgrx::prelude::*;

    fn timing() -> Timing {
        Timing {
            naptime: Duration::from_secs(60),
            jitter: 0.0,
            listed: true,
        }
    }

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("d{i:02}")).collect()
    }

    #[pg_test]
    fn every_database_is_visited_in_turn_by_a_small_pool() {
        let t = timing();
        let start = Instant::now();
        let mut r = Rotation::default();
        let dbs = names(30);
        assert!(r.sync(&dbs, start, t).is_empty());
        let mut visited = Vec::new();
        // Two workers, each visit taking one "tick": 15 ticks serve all 30.
        for _ in 0..15 {
            let now = start;
            let batch = r.next(now, 2);
            assert_eq!(batch.len(), 2);
            for db in &batch {
                r.started(db);
            }
            for db in &batch {
                r.ended(db, now, t);
            }
            visited.extend(batch);
        }
        visited.sort();
        assert_eq!(visited, dbs, "each database once, none twice");
        assert!(
            r.next(start, 2).is_empty(),
            "nothing due again before a naptime"
        );
        assert_eq!(r.next(start + Duration::from_secs(61), 40).len(), 30);
    }

    #[pg_test]
    fn an_unfinished_database_goes_behind_those_waiting_longer() {
        let t = timing();
        let start = Instant::now();
        let mut r = Rotation::default();
        r.sync(&names(3), start, t);
        r.started("d00");
        let later = start + Duration::from_secs(5);
        r.request("d00", Request::Unfinished, later, t);
        r.ended("d00", later, t);
        // d01 and d02 were due at `start`, d00 again at `later`.
        assert_eq!(r.next(later, 3), vec!["d01", "d02", "d00"]);
        assert_eq!(r.next(later, 1), vec!["d01"]);
    }

    #[pg_test]
    fn a_wake_makes_an_idle_database_due_now_and_a_busy_one_due_when_its_visit_ends() {
        let t = timing();
        let start = Instant::now();
        let mut r = Rotation::default();
        r.sync(&names(2), start, t);
        for db in ["d00", "d01"] {
            r.started(db);
            r.ended(db, start, t);
        }
        let now = start + Duration::from_secs(1);
        assert!(r.next(now, 2).is_empty());
        r.request("d00", Request::Wake, now, t);
        assert_eq!(r.next(now, 2), vec!["d00"]);
        r.started("d01");
        r.request("d01", Request::Wake, now, t);
        assert_eq!(
            r.next(now, 2),
            vec!["d00"],
            "not while its visit is under way"
        );
        r.ended("d01", now, t);
        assert_eq!(r.next(now, 2), vec!["d00", "d01"]);
    }

    #[pg_test]
    fn a_database_without_the_extension_is_looked_at_again_soon_only_when_listed() {
        let start = Instant::now();
        for (listed, soon) in [(true, true), (false, false)] {
            let t = Timing { listed, ..timing() };
            let mut r = Rotation::default();
            r.sync(&names(1), start, t);
            r.started("d00");
            r.request("d00", Request::NoExtension, start, t);
            r.ended("d00", start, t);
            let at = start + EXTENSION_POLL;
            assert_eq!(r.next(at, 1).len(), usize::from(soon), "listed = {listed}");
        }
    }

    #[pg_test]
    fn a_new_naptime_applies_to_the_wait_under_way_but_not_to_a_wake() {
        let t = timing();
        let start = Instant::now();
        let mut r = Rotation::default();
        r.sync(&names(2), start, t);
        for db in ["d00", "d01"] {
            r.started(db);
            r.ended(db, start, t);
        }
        let now = start + Duration::from_secs(3);
        r.request("d01", Request::Wake, now, t);
        r.retime(Timing {
            naptime: Duration::from_secs(2),
            ..t
        });
        assert_eq!(r.next(now, 2), vec!["d00", "d01"]);
        r.retime(Timing {
            naptime: Duration::from_secs(3600),
            ..t
        });
        assert_eq!(r.next(now, 2), vec!["d01"], "the wake stands");
    }

    #[pg_test]
    fn a_database_leaving_the_list_is_returned_and_forgotten() {
        let t = timing();
        let start = Instant::now();
        let mut r = Rotation::default();
        r.sync(&names(3), start, t);
        let gone = r.sync(&names(2), start, t);
        assert_eq!(gone, vec!["d02"]);
        assert_eq!(r.next(start, 5), vec!["d00", "d01"]);
    }
}
