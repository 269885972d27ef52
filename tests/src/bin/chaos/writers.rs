//! The application: writers as `app` (table privileges only) inserting, updating and deleting
//! rows of both tables, each write recorded in the shadow with whether its answer came back.

use crate::rng::Rng;
use crate::world::{now_us, outcome_unknown, Outcome, RowShadow, Table, What, World};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Subjects rows belong to (holds and erasures name them).
pub const SUBJECTS: i32 = 120;

/// One writer's loop until the run stops.
pub fn run(world: &World, mut rng: Rng, pause_ms: u64) {
    let mut db: Option<postgres::Client> = None;
    let mut mine: Vec<(Table, i64)> = Vec::new();
    while !world.stopping() {
        if db.is_none() {
            db = world.connect("app");
        }
        let Some(client) = db.as_mut() else { break };
        let _gate = world.gate.read();
        let erased = match world.erased.read() {
            Ok(e) => e,
            Err(e) => e.into_inner(),
        };
        let op = rng.pick(&[60, 25, 15]);
        let lost = if op == 0 || mine.is_empty() {
            let table = Table::ALL[rng.below(2) as usize];
            let mut subject = rng.below(SUBJECTS as u64) as i32;
            while erased.contains(&subject) {
                subject = rng.below(SUBJECTS as u64) as i32;
            }
            insert(world, client, &mut rng, table, subject, &mut mine)
        } else {
            let i = rng.below(mine.len() as u64) as usize;
            let (table, id) = mine[i];
            let subject = shadow_subject(world, table, id);
            if erased.contains(&subject) {
                mine.swap_remove(i);
                false
            } else if op == 1 {
                update(world, client, table, id, &mut mine, i)
            } else {
                delete(world, client, table, id, &mut mine, i)
            }
        };
        drop(erased);
        if lost {
            db = None;
        }
        if mine.len() > 4000 {
            mine.drain(..1000);
        }
        std::thread::sleep(Duration::from_millis(rng.between(0, pause_ms)));
    }
}

fn shadow_subject(world: &World, table: Table, id: i64) -> i32 {
    world
        .shadow
        .lock()
        .ok()
        .and_then(|s| s.get(&(table, id)).map(|r| r.subject))
        .unwrap_or(-1)
}

/// What a statement's answer says: done, refused by the server (with its SQLSTATE), or lost.
enum Answer {
    Done(u64),
    Refused(String),
    Lost,
}

fn answer(r: Result<u64, postgres::Error>) -> Answer {
    match r {
        Ok(n) => Answer::Done(n),
        Err(e) if outcome_unknown(&e) => Answer::Lost,
        Err(e) => Answer::Refused(e.code().map_or_else(String::new, |c| c.code().to_owned())),
    }
}

/// Inserts a row; returns whether the connection was lost.
fn insert(
    world: &World,
    db: &mut postgres::Client,
    rng: &mut Rng,
    table: Table,
    subject: i32,
    mine: &mut Vec<(Table, i64)>,
) -> bool {
    let id = world.next_id.fetch_add(1, Ordering::SeqCst);
    // Up to two minutes old: some rows are past the window the moment they are written.
    let created_us = now_us() - rng.between(0, 120_000_000) as i64;
    let open = table == Table::Audit && rng.chance(0.3);
    let r = match table {
        Table::Events => db.execute(
            "INSERT INTO events (id, subject, created_at, note, version)
             VALUES ($1, $2, 'epoch'::timestamptz + ($3::bigint || ' microseconds')::interval,
                     chaos_note($1, 0), 0)",
            &[&id, &subject, &created_us],
        ),
        Table::Audit => db.execute(
            "INSERT INTO audit (id, subject, created_at, state, amount, body, version)
             VALUES ($1, $2, 'epoch'::timestamptz + ($3::bigint || ' microseconds')::interval,
                     $4, chaos_amount($1, 0), chaos_body($1, 0), 0)",
            &[
                &id,
                &subject,
                &created_us,
                &(if open { "open" } else { "closed" }),
            ],
        ),
    };
    let outcome = match answer(r) {
        Answer::Done(_) => Outcome::Done,
        Answer::Lost => Outcome::Unknown,
        Answer::Refused(code) => {
            refused(world, "insert_refused", table, id, &code);
            return false;
        }
    };
    if let Ok(mut s) = world.shadow.lock() {
        s.insert(
            (table, id),
            RowShadow {
                subject,
                created_us,
                initially_open: open,
                insert: outcome,
                updates: Vec::new(),
                app_delete: None,
            },
        );
    }
    world.count("rows_inserted", 1);
    world.event(
        "insert",
        What::Write(table, id),
        format!(
            "insert {} {id} subject {subject} age {:.1}s{}{}",
            table.name(),
            (now_us() - created_us) as f64 / 1e6,
            if open { " open" } else { "" },
            if outcome == Outcome::Unknown {
                " (answer lost)"
            } else {
                ""
            }
        ),
    );
    mine.push((table, id));
    outcome == Outcome::Unknown
}

/// Updates one of this writer's rows to its next version.
fn update(
    world: &World,
    db: &mut postgres::Client,
    table: Table,
    id: i64,
    mine: &mut Vec<(Table, i64)>,
    i: usize,
) -> bool {
    let version = world
        .shadow
        .lock()
        .ok()
        .and_then(|s| s.get(&(table, id)).map(|r| r.updates.len() as i32 + 1))
        .unwrap_or(1);
    let r = match table {
        Table::Events => db.execute(
            "UPDATE events SET version = $2, note = chaos_note(id, $2) WHERE id = $1",
            &[&id, &version],
        ),
        Table::Audit => db.execute(
            "UPDATE audit SET version = $2, state = 'closed', amount = chaos_amount(id, $2),
                    body = chaos_body(id, $2) WHERE id = $1",
            &[&id, &version],
        ),
    };
    let outcome = match answer(r) {
        Answer::Done(0) => {
            mine.swap_remove(i);
            return false;
        }
        Answer::Done(_) => Outcome::Done,
        Answer::Lost => Outcome::Unknown,
        Answer::Refused(code) => {
            // RT501: an eligible archive row is frozen; RT402: an enforced hold.
            refused(world, "update_refused", table, id, &code);
            if code == "RT501" {
                mine.swap_remove(i);
            }
            return false;
        }
    };
    if let Ok(mut s) = world.shadow.lock() {
        if let Some(row) = s.get_mut(&(table, id)) {
            row.updates.push((version, outcome));
        }
    }
    world.count("rows_updated", 1);
    world.event(
        "update",
        What::Write(table, id),
        format!("update {} {id} to version {version}", table.name()),
    );
    outcome == Outcome::Unknown
}

/// The application's own DELETE of one of its rows.
fn delete(
    world: &World,
    db: &mut postgres::Client,
    table: Table,
    id: i64,
    mine: &mut Vec<(Table, i64)>,
    i: usize,
) -> bool {
    let sent = now_us();
    let sql = format!("DELETE FROM {} WHERE id = $1", table.name());
    let outcome = match answer(db.execute(sql.as_str(), &[&id])) {
        Answer::Done(0) => {
            mine.swap_remove(i);
            return false;
        }
        Answer::Done(_) => Outcome::Done,
        Answer::Lost => Outcome::Unknown,
        Answer::Refused(code) => {
            refused(world, "delete_refused", table, id, &code);
            return false;
        }
    };
    mine.swap_remove(i);
    if let Ok(mut s) = world.shadow.lock() {
        if let Some(row) = s.get_mut(&(table, id)) {
            row.app_delete = Some((outcome, sent));
        }
    }
    world.count("rows_app_deleted", 1);
    world.event(
        "app_delete",
        What::Write(table, id),
        format!("app delete {} {id}", table.name()),
    );
    outcome == Outcome::Unknown
}

/// Records a write the server refused (its SQLSTATE says why; nothing changed).
fn refused(world: &World, kind: &'static str, table: Table, id: i64, code: &str) {
    world.count("write_refused", 1);
    world.event(
        kind,
        What::Write(table, id),
        format!("{kind} {} {id}: {code}", table.name()),
    );
}
