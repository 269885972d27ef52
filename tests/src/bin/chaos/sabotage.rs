//! Deliberate wrongs done behind the product's back before the checker runs, to prove the
//! checker catches them (`--sabotage`): a row deleted with no trace, a row of an erased subject
//! put back, a row's content changed.

use crate::world::{now_us, What, World};

/// The wrongs there are.
pub const KINDS: [&str; 3] = ["unaccounted", "resurrect", "tamper"];

/// Does each of `kinds` as the superuser (triggers off, as a careless operator would).
pub fn commit(world: &World, kinds: &[String]) -> Result<(), String> {
    let primary = world.primary();
    let mut db = primary.connect("postgres");
    let e = |e: postgres::Error| e.to_string();
    db.batch_execute("SET session_replication_role = replica")
        .map_err(e)?;
    for kind in kinds {
        match kind.as_str() {
            "unaccounted" => {
                let n = db
                    .execute(
                        "DELETE FROM events WHERE id = (SELECT min(id) FROM events)",
                        &[],
                    )
                    .map_err(e)?;
                world.event(
                    "sabotage",
                    What::Policy,
                    format!("sabotage: {n} events row deleted behind retention's back"),
                );
            }
            "resurrect" => {
                let subject = erased_subject(world)?;
                let id = world
                    .next_id
                    .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                db.execute(
                    "INSERT INTO audit (id, subject, created_at, state, amount, body, version)
                     VALUES ($1, $2, now(), 'open', chaos_amount($1, 0), chaos_body($1, 0), 0)",
                    &[&id, &subject],
                )
                .map_err(e)?;
                world.event(
                    "sabotage",
                    What::Erase(subject),
                    format!("sabotage: audit {id} of erased subject {subject} written back"),
                );
            }
            "tamper" => {
                let n = db
                    .execute("UPDATE events SET note = 'tampered' WHERE id = (SELECT max(id) FROM events)", &[])
                    .map_err(e)?;
                world.event(
                    "sabotage",
                    What::Policy,
                    format!("sabotage: {n} events row changed behind the writers' back"),
                );
            }
            other => {
                return Err(format!(
                    "unknown sabotage {other} (known: {})",
                    KINDS.join(", ")
                ))
            }
        }
    }
    Ok(())
}

/// A subject erased during the run, or one erased now (as `dpo`, the way the driver does).
fn erased_subject(world: &World) -> Result<i32, String> {
    if let Some(s) = world
        .erasures
        .lock()
        .ok()
        .and_then(|e| e.keys().next().copied())
    {
        return Ok(s);
    }
    let subject = 0;
    if let Ok(mut erased) = world.erased.write() {
        erased.insert(subject);
    }
    if let Ok(mut e) = world.erasures.lock() {
        e.insert(subject, now_us());
    }
    let primary = world.primary();
    let mut dpo = primary.connect_as("postgres", "dpo");
    for table in ["events", "audit"] {
        dpo.query_one(
            "SELECT retention.erase($1::text::regclass, 'subject = 0', 'chaos-sabotage', 'chaos')",
            &[&table],
        )
        .map_err(|e| e.to_string())?;
    }
    world.event(
        "erase",
        What::Erase(subject),
        "erase subject 0 (for the sabotage)".into(),
    );
    Ok(subject)
}
