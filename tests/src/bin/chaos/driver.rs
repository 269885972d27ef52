//! The driver: at random points it places and lifts holds, erases subjects, alters policies
//! within their floors (and tries below them), registers consumers and reports their
//! positions, runs and wakes, and injects faults: an archiver killed or aborted at an armed
//! pipeline step, PostgreSQL shut down immediately, the object store stopped, the standby
//! promoted.

use crate::archivers::{Slot, FAULT_POINTS};
use crate::rng::Rng;
use crate::world::{now_us, outcome_unknown as lost, ConsumerSeen, HoldSeen, Table, What, World};
use crate::writers::SUBJECTS;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What the driver may do.
pub struct Options {
    /// Inject faults.
    pub faults: bool,
    /// Promote the standby once, after this long (None: never).
    pub promote_after: Option<Duration>,
    /// How long the run lasts: erasures are spread over it.
    pub duration: Duration,
}

/// Connections the driver acts through, each made again when lost.
struct Sessions {
    admin: Option<postgres::Client>,
    dpo: Option<postgres::Client>,
    reader: Option<postgres::Client>,
}

impl Sessions {
    fn get<'a>(
        world: &World,
        slot: &'a mut Option<postgres::Client>,
        role: &str,
    ) -> Option<&'a mut postgres::Client> {
        if slot.is_none() {
            *slot = world.connect(role);
        }
        slot.as_mut()
    }
}

fn code(e: &postgres::Error) -> String {
    e.code()
        .map_or_else(|| "connection".to_owned(), |c| c.code().to_owned())
}

/// The driver's loop until the run stops.
pub fn run(world: &World, mut rng: Rng, slots: &[Arc<Slot>], options: &Options) {
    let mut s = Sessions {
        admin: None,
        dpo: None,
        reader: None,
    };
    let mut epoch: Option<i64> = None;
    let mut promoted = false;
    while !world.stopping() {
        std::thread::sleep(Duration::from_millis(rng.between(150, 1200)));
        if world.stopping() {
            break;
        }
        if let (Some(after), false) = (options.promote_after, promoted) {
            if world.t0.elapsed() >= after {
                promoted = true;
                promote(world, slots);
                s = Sessions {
                    admin: None,
                    dpo: None,
                    reader: None,
                };
                continue;
            }
        }
        let fault_weight = if options.faults { 1 } else { 0 };
        let op = rng.pick(&[
            10,               // place a hold
            8,                // lift a hold
            2,                // erase a subject
            6,                // alter a policy within its floor
            1,                // try to alter below the floor
            8,                // consumer
            3,                // wake
            2,                // manual run
            4 * fault_weight, // kill -9 an archiver
            3 * fault_weight, // arm a fault point and kill
            fault_weight,     // immediate shutdown
            2 * fault_weight, // object store outage
        ]);
        let _gate = world.gate.read();
        match op {
            0 => place_hold(world, &mut rng, &mut s),
            1 => lift_hold(world, &mut rng, &mut s),
            2 => erase(world, &mut rng, &mut s, options.duration),
            3 => alter(world, &mut rng, &mut s, false),
            4 => alter(world, &mut rng, &mut s, true),
            5 => consumer(world, &mut rng, &mut s, &mut epoch),
            6 => simple(world, &mut s, "wake", "SELECT retention.wake()"),
            7 => simple(world, &mut s, "manual_run", "CALL retention.run('events')"),
            8 => {
                let slot = &slots[rng.below(slots.len() as u64) as usize];
                slot.kill.store(true, Ordering::SeqCst);
                world.event(
                    "fault_kill9_archiver",
                    What::Fault,
                    format!("kill -9 archiver {}", slot.index),
                );
            }
            9 => {
                let slot = &slots[rng.below(slots.len() as u64) as usize];
                let point = FAULT_POINTS[rng.below(FAULT_POINTS.len() as u64) as usize];
                if let Ok(mut a) = slot.arm.lock() {
                    *a = Some(point);
                }
                slot.kill.store(true, Ordering::SeqCst);
                world.event(
                    "fault_armed_archiver",
                    What::Fault,
                    format!("archiver {} restarted armed at {point}", slot.index),
                );
            }
            10 => crash(world, &mut rng),
            _ => outage(world, &mut rng),
        }
    }
}

fn place_hold(world: &World, rng: &mut Rng, s: &mut Sessions) {
    let active = world
        .holds
        .lock()
        .map(|h| h.iter().filter(|h| h.lift_sent_us.is_none()).count())
        .unwrap_or(0);
    if active >= 8 {
        return lift_hold(world, rng, s);
    }
    let Some(db) = Sessions::get(world, &mut s.admin, "admin") else {
        return;
    };
    let table = Table::ALL[rng.below(2) as usize];
    let subject = rng.below(SUBJECTS as u64) as i32;
    let enforced = rng.chance(0.3);
    let r = db.query_one(
        "SELECT retention.place_hold($1::text::regclass, $2, 'chaos', 'chaos-driver', $3)",
        &[&table.name(), &format!("subject = {subject}"), &enforced],
    );
    match r {
        Ok(row) => {
            let id: i64 = row.get(0);
            let placed_us = now_us();
            if let Ok(mut h) = world.holds.lock() {
                h.push(HoldSeen {
                    id,
                    table,
                    subject,
                    enforced,
                    placed_us,
                    lift_sent_us: None,
                });
            }
            world.event(
                "hold_place",
                What::Hold(table, subject),
                format!(
                    "hold {id} on {} subject {subject}{}",
                    table.name(),
                    if enforced { " (enforced)" } else { "" }
                ),
            );
        }
        Err(e) => failed(world, &mut s.admin, "hold_place", &e),
    }
}

fn lift_hold(world: &World, rng: &mut Rng, s: &mut Sessions) {
    let Some(db) = Sessions::get(world, &mut s.admin, "admin") else {
        return;
    };
    let pick = world.holds.lock().ok().and_then(|mut h| {
        let active: Vec<usize> = (0..h.len())
            .filter(|i| h[*i].lift_sent_us.is_none())
            .collect();
        if active.is_empty() {
            return None;
        }
        let i = active[rng.below(active.len() as u64) as usize];
        h[i].lift_sent_us = Some(now_us());
        Some((i, h[i].clone()))
    });
    let Some((i, hold)) = pick else { return };
    match db.execute(
        "SELECT retention.lift_hold($1, 'chaos-driver', 'chaos')",
        &[&hold.id],
    ) {
        Ok(_) => world.event(
            "hold_lift",
            What::Hold(hold.table, hold.subject),
            format!(
                "lift hold {} on {} subject {}",
                hold.id,
                hold.table.name(),
                hold.subject
            ),
        ),
        Err(e) => {
            if !lost(&e) {
                if let Ok(mut h) = world.holds.lock() {
                    h[i].lift_sent_us = None;
                }
            }
            failed(world, &mut s.admin, "hold_lift", &e);
        }
    }
}

/// Erases a subject from both tables. Every row of the subject was committed before (the
/// writers' shared hold on `erased`), and a call whose answer was lost is made again: an
/// erasure is idempotent.
fn erase(world: &World, rng: &mut Rng, s: &mut Sessions, duration: Duration) {
    // A third of the subjects at most, spread over the run.
    let elapsed = world.t0.elapsed().as_secs_f64() / duration.as_secs_f64().max(1.0);
    let allowed = 1 + (f64::from(SUBJECTS / 3) * elapsed.min(1.0)) as usize;
    let subject = {
        let Ok(mut erased) = world.erased.write() else {
            return;
        };
        if erased.len() >= allowed {
            return;
        }
        let mut subject = rng.below(SUBJECTS as u64) as i32;
        while erased.contains(&subject) {
            subject = rng.below(SUBJECTS as u64) as i32;
        }
        erased.insert(subject);
        subject
    };
    if let Ok(mut e) = world.erasures.lock() {
        e.insert(subject, now_us());
    }
    let deadline = Instant::now() + Duration::from_secs(300);
    for table in Table::ALL {
        loop {
            let Some(db) = Sessions::get(world, &mut s.dpo, "dpo") else {
                return;
            };
            let r = db.query_one(
                "SELECT retention.erase($1::text::regclass, $2, $3, 'chaos-driver')",
                &[
                    &table.name(),
                    &format!("subject = {subject}"),
                    &format!("chaos-{subject}"),
                ],
            );
            match r {
                Ok(row) => {
                    let n: i64 = row.get(0);
                    world.event(
                        "erase",
                        What::Erase(subject),
                        format!("erase subject {subject} from {}: {n} rows", table.name()),
                    );
                    break;
                }
                Err(e) => {
                    failed(world, &mut s.dpo, "erase", &e);
                    if Instant::now() > deadline {
                        world.event(
                            "erase_abandoned",
                            What::Erase(subject),
                            format!("erase subject {subject}: gave up"),
                        );
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(500));
                }
            }
        }
    }
}

/// Alters a policy's window: within its floor (10 s), or below it, which must be refused.
fn alter(world: &World, rng: &mut Rng, s: &mut Sessions, below_floor: bool) {
    let Some(db) = Sessions::get(world, &mut s.admin, "admin") else {
        return;
    };
    let table = Table::ALL[rng.below(2) as usize];
    let secs = if below_floor {
        rng.between(1, 9)
    } else {
        rng.between(10, 60)
    };
    let r = db.query_one(
        "SELECT retention.alter_policy(name => $1, older_than => $2::text::interval)",
        &[&table.name(), &format!("{secs} seconds")],
    );
    match (r, below_floor) {
        (Ok(_), false) => world.event(
            "alter",
            What::Policy,
            format!("alter {} older_than {secs}s", table.name()),
        ),
        (Ok(_), true) => world.event(
            "floor_broken",
            What::Policy,
            format!(
                "VIOLATION: alter {} older_than {secs}s below its 10 s floor was accepted",
                table.name()
            ),
        ),
        (Err(e), true) if code(&e) == "22023" => world.event(
            "alter_below_floor_refused",
            What::Policy,
            format!("alter {} older_than {secs}s refused (22023)", table.name()),
        ),
        (Err(e), _) => failed(world, &mut s.admin, "alter", &e),
    }
}

/// The pull consumer `feed` of `events`: registered by admin, reporting as `reader`.
fn consumer(world: &World, rng: &mut Rng, s: &mut Sessions, epoch: &mut Option<i64>) {
    match *epoch {
        None => {
            let Some(db) = Sessions::get(world, &mut s.admin, "admin") else {
                return;
            };
            match db.query_one(
                "SELECT retention.register_consumer('events', 'feed', '1 hour', 'reader')",
                &[],
            ) {
                Ok(row) => {
                    *epoch = Some(row.get(0));
                    if let Ok(mut c) = world.consumers.lock() {
                        c.push(ConsumerSeen {
                            registered_us: now_us(),
                            unregister_sent_us: None,
                            reports: vec![],
                        });
                    }
                    world.event(
                        "consumer_register",
                        What::Consumer,
                        format!("register feed epoch {:?}", epoch),
                    );
                }
                Err(e) => failed(world, &mut s.admin, "consumer_register", &e),
            }
        }
        Some(_) if rng.chance(0.08) => {
            let Some(db) = Sessions::get(world, &mut s.admin, "admin") else {
                return;
            };
            if let Ok(mut c) = world.consumers.lock() {
                if let Some(last) = c.last_mut() {
                    last.unregister_sent_us = Some(now_us());
                }
            }
            *epoch = None;
            match db.execute(
                "SELECT retention.unregister_consumer('events', 'feed')",
                &[],
            ) {
                Ok(_) => world.event(
                    "consumer_unregister",
                    What::Consumer,
                    "unregister feed".into(),
                ),
                Err(e) => failed(world, &mut s.admin, "consumer_unregister", &e),
            }
        }
        Some(e) => {
            let Some(db) = Sessions::get(world, &mut s.reader, "reader") else {
                return;
            };
            let head: Option<i64> = match db.query_one("SELECT max(id) FROM events", &[]) {
                Ok(row) => row.get(0),
                Err(err) => return failed(world, &mut s.reader, "consumer_report", &err),
            };
            let Some(head) = head else { return };
            let position = head - rng.between(0, 400) as i64;
            if let Ok(mut c) = world.consumers.lock() {
                if let Some(last) = c.last_mut() {
                    last.reports.push((now_us(), position));
                }
            }
            match db.execute(
                "SELECT retention.report_position('events', 'feed', $1, $2)",
                &[&e, &position.to_string()],
            ) {
                Ok(_) => world.event(
                    "consumer_report",
                    What::Consumer,
                    format!("feed reports {position}"),
                ),
                Err(err) if code(&err) == "RT313" => {
                    *epoch = None;
                    failed(world, &mut s.reader, "consumer_report", &err);
                }
                Err(err) => failed(world, &mut s.reader, "consumer_report", &err),
            }
        }
    }
}

fn simple(world: &World, s: &mut Sessions, kind: &'static str, sql: &str) {
    let Some(db) = Sessions::get(world, &mut s.admin, "admin") else {
        return;
    };
    match db.batch_execute(sql) {
        Ok(()) => world.event(kind, What::Policy, sql.to_owned()),
        Err(e) => failed(world, &mut s.admin, kind, &e),
    }
}

/// Logs a failed call; drops the session when the connection went.
fn failed(
    world: &World,
    session: &mut Option<postgres::Client>,
    kind: &'static str,
    e: &postgres::Error,
) {
    world.count("driver_call_failed", 1);
    let what = e
        .as_db_error()
        .map_or_else(|| e.to_string(), |d| d.message().to_owned());
    world.event(
        "driver_call_failed",
        What::Policy,
        format!("{kind} failed {}: {what}", code(e)),
    );
    if lost(e) {
        *session = None;
    }
}

/// PostgreSQL shut down immediately (no checkpoint), started again after a few seconds.
fn crash(world: &World, rng: &mut Rng) {
    let primary = world.primary();
    primary.crash();
    world.event(
        "fault_pg_immediate_shutdown",
        What::Fault,
        "PostgreSQL: immediate shutdown".into(),
    );
    std::thread::sleep(Duration::from_millis(rng.between(500, 4000)));
    primary.start_again();
    world.event(
        "fault_pg_restart",
        What::Fault,
        "PostgreSQL started again (crash recovery)".into(),
    );
}

/// The object store stopped for a few seconds.
fn outage(world: &World, rng: &mut Rng) {
    let Ok(mut store) = world.store.lock() else {
        return;
    };
    store.stop();
    world.event(
        "fault_store_stopped",
        What::Fault,
        "object store stopped".into(),
    );
    std::thread::sleep(Duration::from_millis(rng.between(1000, 10_000)));
    store.restart();
    world.event(
        "fault_store_started",
        What::Fault,
        "object store started".into(),
    );
}

/// A switchover: with no write in flight, the standby replays everything, the primary stops,
/// the standby is promoted and everyone moves to it.
fn promote(world: &World, slots: &[Arc<Slot>]) {
    let Some(standby) = world.standby.lock().ok().and_then(|mut s| s.take()) else {
        return;
    };
    let _all = world.gate.write();
    let old = world.primary();
    let caught_up = (|| -> Result<bool, postgres::Error> {
        let mut p = postgres::Client::connect(&old.url("postgres"), postgres::NoTls)?;
        let lsn: String = p
            .query_one("SELECT pg_current_wal_lsn()::text", &[])?
            .get(0);
        let mut r = postgres::Client::connect(&standby.url("postgres"), postgres::NoTls)?;
        let deadline = Instant::now() + Duration::from_secs(120);
        while Instant::now() < deadline {
            let done: bool = r
                .query_one(
                    "SELECT pg_last_wal_replay_lsn() >= $1::text::pg_lsn",
                    &[&lsn],
                )?
                .get(0);
            if done {
                return Ok(true);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(false)
    })();
    world.event(
        "standby_caught_up",
        What::Fault,
        format!("standby replay caught up: {caught_up:?}"),
    );
    old.stop();
    standby.promote();
    if let Ok(mut p) = world.primary.write() {
        *p = standby;
    }
    if let Ok(mut r) = world.retired.lock() {
        r.push(old);
    }
    for slot in slots {
        slot.kill.store(true, Ordering::SeqCst);
    }
    world.event(
        "fault_standby_promoted",
        What::Fault,
        "switchover: standby promoted, primary stopped".into(),
    );
}
