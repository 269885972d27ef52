//! The invariant checker: once the run is quiet, proves from the database, the store (every
//! live archive restored) and the shadow of what the writers did that
//!
//! 1. no held row was deleted, but by an erasure, and no enforced hold let the application
//!    change or delete a row it covered;
//! 2. every archive-class row that left was archived (is in a live slice), or was erased; a
//!    slice holds a row its prune did not delete (the row is still there, deleted by the
//!    application or archived again) only where that prune may rightly have kept it: held, or
//!    no longer eligible under the window in force then;
//! 3. no erased row is in the tables or in any restorable slice;
//! 4. the ledger's counts equal the rows that left, per table and method (the swept table's
//!    keys exactly, from `record_keys`);
//! 5. no row was deleted before it was eligible under the policy version that deleted it;
//! 6. restoring every live archive gives exactly its rows, each the version the writers wrote;
//! 7. no row at or past a live consumer's reported position was swept;
//! 8. a window below a policy's floor was never accepted.
//!
//! Times are compared with a margin (`MARGIN_US`): a hold counts as in force for a delete only
//! when it was committed that long before the delete's ledger entry and its lift sent that long
//! after, which keeps statement snapshots and clock reads on the safe side.

use crate::readback::{matches_shadow, read_rows, Seen};
use crate::world::{Outcome, RowShadow, Table, World};
use pg_retention_integration::archiver::Archiver;
use std::collections::{BTreeMap, HashMap, HashSet};

/// Invariant 7: consumer positions against the sweeps.
mod consumers;
/// The report: violations, checks and figures.
mod report;
/// The safety margin and the time judgements made with it.
mod timing;

use consumers::check_consumers;
use report::violation;
pub use report::{Report, Violation};
use timing::{prune_may_have_kept, surely_in_force, MARGIN_US};

/// Runs every check. `restorer` restores into `public` of the primary.
pub fn check(
    world: &World,
    db: &mut postgres::Client,
    restorer: &Archiver,
) -> Result<Report, String> {
    let mut report = Report::default();
    let e = |e: postgres::Error| e.to_string();
    let shadow = world.shadow.lock().map_err(|_| "shadow poisoned")?.clone();
    let holds = world.holds.lock().map_err(|_| "holds poisoned")?.clone();
    let consumers = world
        .consumers
        .lock()
        .map_err(|_| "consumers poisoned")?
        .clone();
    let erasures = world
        .erasures
        .lock()
        .map_err(|_| "erasures poisoned")?
        .clone();

    // Windows by (policy, version), in µs.
    let mut window: HashMap<(String, i32), i64> = HashMap::new();
    for r in db
        .query(
            "SELECT name, version, (extract(epoch FROM older_than) * 1000000)::bigint
               FROM retention.policy_history WHERE older_than IS NOT NULL",
            &[],
        )
        .map_err(e)?
    {
        window.insert((r.get(0), r.get(1)), r.get(2));
    }

    // The ledger.
    struct Entry {
        at_us: i64,
        method: String,
        policy: Option<String>,
        version: Option<i32>,
        relation: String,
        rows_deleted: i64,
        keys: Vec<i64>,
        archive_id: Option<i64>,
    }
    let mut ledger = Vec::new();
    for r in db
        .query(
            "SELECT (extract(epoch FROM at) * 1000000)::bigint, method, policy, policy_version,
                    coalesce(regexp_replace(relation, '^public\\.', ''), ''), rows_deleted,
                    coalesce(ARRAY(SELECT (k->>0)::bigint FROM jsonb_array_elements(detail->'keys') k),
                             '{}'),
                    archive_id
               FROM retention.ledger ORDER BY id",
            &[],
        )
        .map_err(e)?
    {
        ledger.push(Entry {
            at_us: r.get(0),
            method: r.get(1),
            policy: r.get(2),
            version: r.get(3),
            relation: r.get(4),
            rows_deleted: r.get(5),
            keys: r.get(6),
            archive_id: r.get(7),
        });
    }

    let held_at = |table: Table, subject: i32, at: i64| -> Option<i64> {
        holds
            .iter()
            .find(|h| {
                h.table == table
                    && h.subject == subject
                    && surely_in_force(h.placed_us, h.lift_sent_us, at)
            })
            .map(|h| h.id)
    };
    let erased_at = |subject: i32| erasures.get(&subject).copied();

    // Live rows.
    let mut live: HashMap<(Table, i64), Seen> = HashMap::new();
    for table in Table::ALL {
        for s in read_rows(db, table, table.name()).map_err(e)? {
            live.insert((table, s.id), s);
        }
    }
    report.figures.insert("rows_live", live.len() as i64);
    for ((table, id), seen) in &live {
        let row = shadow.get(&(*table, *id));
        report.check("6 rows as written", matches_shadow(seen, row, true), || {
            Violation {
                row: Some((*table, *id)),
                ..violation(format!(
                    "live row {} {id} is not what the writers wrote: {seen:?}",
                    table.name()
                ))
            }
        });
        if let Some(t) = erased_at(seen.subject) {
            report.check("3 erased rows gone", false, || Violation {
                row: Some((*table, *id)),
                subject: Some(seen.subject),
                at_us: Some(t),
                ..violation(format!(
                    "{} {id} of erased subject {} is still in the table",
                    table.name(),
                    seen.subject
                ))
            });
        }
    }

    // The swept table: every key the ledger says went.
    let mut swept: HashMap<i64, (i64, String, Option<i32>)> = HashMap::new();
    for entry in ledger
        .iter()
        .filter(|l| l.relation == "events" && l.method == "prune")
    {
        report.check(
            "4 ledger equals rows that left",
            entry.keys.len() as i64 == entry.rows_deleted,
            || {
                violation(format!(
                    "prune entry at {} counts {} rows but lists {} keys",
                    entry.at_us,
                    entry.rows_deleted,
                    entry.keys.len()
                ))
            },
        );
        for id in &entry.keys {
            let again = swept.insert(
                *id,
                (
                    entry.at_us,
                    entry.policy.clone().unwrap_or_default(),
                    entry.version,
                ),
            );
            report.check("4 ledger equals rows that left", again.is_none(), || {
                Violation {
                    row: Some((Table::Events, *id)),
                    at_us: Some(entry.at_us),
                    ..violation(format!("events {id} is ledgered as deleted twice"))
                }
            });
        }
    }
    report
        .figures
        .insert("events_rows_swept", swept.len() as i64);
    for (id, (at, policy, version)) in &swept {
        let row = shadow.get(&(Table::Events, *id));
        let Some(row) = row else {
            report.check("4 ledger equals rows that left", false, || Violation {
                row: Some((Table::Events, *id)),
                ..violation(format!("ledger deleted events {id}, which no writer wrote"))
            });
            continue;
        };
        report.check(
            "4 ledger equals rows that left",
            !live.contains_key(&(Table::Events, *id)),
            || Violation {
                row: Some((Table::Events, *id)),
                at_us: Some(*at),
                ..violation(format!(
                    "events {id} is ledgered as deleted but is still there"
                ))
            },
        );
        if let Some(hold) = held_at(Table::Events, row.subject, *at) {
            report.check("1 held rows stay", false, || Violation {
                row: Some((Table::Events, *id)),
                subject: Some(row.subject),
                at_us: Some(*at),
                ..violation(format!(
                    "events {id} was swept while hold {hold} covered it"
                ))
            });
        } else {
            report.check("1 held rows stay", true, || violation(String::new()));
        }
        if let Some(w) = version.and_then(|v| window.get(&(policy.clone(), v))) {
            report.check(
                "5 nothing deleted before eligible",
                row.created_us < at - w,
                || Violation {
                    row: Some((Table::Events, *id)),
                    at_us: Some(*at),
                    ..violation(format!(
                        "events {id} swept at age {:.2}s under a window of {:.0}s",
                        (at - row.created_us) as f64 / 1e6,
                        *w as f64 / 1e6
                    ))
                },
            );
        }
        check_consumers(&mut report, &consumers, *id, *at);
    }

    // Restore every live archive.
    let archives = db
        .query(
            "SELECT a.id, a.object_key, a.rows, a.deleted, a.policy_version, a.policy
               FROM retention.archives a WHERE a.expired_at IS NULL ORDER BY a.id",
            &[],
        )
        .map_err(e)?;
    let mut in_slices: HashMap<i64, Vec<(i64, Seen)>> = HashMap::new();
    let mut archived_rows = 0i64;
    let mut archived_deleted = 0i64;
    for a in &archives {
        let (id, key, rows, deleted): (i64, String, i64, i64) =
            (a.get(0), a.get(1), a.get(2), a.get(3));
        archived_rows += rows;
        archived_deleted += deleted;
        let target = format!("public.chaos_restored_{id}");
        let o = restorer.run(&["restore", &key, "--into", &target]);
        report.check("6 every live slice restores", o.status.success(), || {
            violation(format!(
                "restore of archive {id} ({key}) failed: {}",
                pg_retention_integration::archiver::text(&o)
            ))
        });
        if !o.status.success() {
            continue;
        }
        let got = read_rows(db, Table::Audit, &target).map_err(e)?;
        db.batch_execute(&format!("DROP TABLE {target}"))
            .map_err(e)?;
        report.check(
            "6 every live slice restores",
            got.len() as i64 == rows,
            || {
                violation(format!(
                    "archive {id} records {rows} rows, its slice restores {}",
                    got.len()
                ))
            },
        );
        for s in got {
            in_slices.entry(s.id).or_default().push((id, s));
        }
    }
    report
        .figures
        .insert("archives_live", archives.len() as i64);
    report
        .figures
        .insert("rows_in_live_archives", archived_rows);
    report
        .figures
        .insert("audit_rows_deleted_by_archive", archived_deleted);

    // When each archive's prune was ledgered.
    let mut pruned_at: HashMap<i64, (i64, Option<String>, Option<i32>)> = HashMap::new();
    for l in ledger
        .iter()
        .filter(|l| l.method == "prune" && l.relation == "audit")
    {
        if let Some(a) = l.archive_id {
            pruned_at.insert(a, (l.at_us, l.policy.clone(), l.version));
        }
    }
    let ever_held: HashSet<(Table, i32)> = holds.iter().map(|h| (h.table, h.subject)).collect();
    // `prune_may_have_kept` for the prune of archive `archive`, its window by the version it names.
    let may_have_kept = |archive: i64, row: &RowShadow| -> bool {
        let prune = pruned_at.get(&archive).map(|(at, policy, version)| {
            let policy = policy.clone().unwrap_or_default();
            (*at, version.and_then(|v| window.get(&(policy, v)).copied()))
        });
        prune_may_have_kept(
            row.created_us,
            ever_held.contains(&(Table::Audit, row.subject)),
            prune,
        )
    };
    for (id, copies) in &in_slices {
        let row = shadow.get(&(Table::Audit, *id));
        for (archive, s) in copies {
            report.check("6 rows as written", matches_shadow(s, row, false), || {
                Violation {
                    row: Some((Table::Audit, *id)),
                    ..violation(format!(
                        "archive {archive} holds audit {id} not as written: {s:?}"
                    ))
                }
            });
            if let Some(t) = erased_at(s.subject) {
                report.check("3 erased rows gone", false, || Violation {
                    row: Some((Table::Audit, *id)),
                    subject: Some(s.subject),
                    at_us: Some(t),
                    ..violation(format!(
                        "audit {id} of erased subject {} restores from archive {archive}",
                        s.subject
                    ))
                });
            }
        }
        let Some(row) = row else {
            continue;
        };
        // Which copy's prune deleted the row: none while it is in the table or the application
        // surely deleted it; else the newest (an application delete of unknown outcome leaves
        // that open).
        let newest = copies.iter().map(|(a, _)| *a).max();
        let deleted_by_newest = !live.contains_key(&(Table::Audit, *id))
            && !matches!(row.app_delete, Some((Outcome::Done, _)));
        for (archive, _) in copies {
            if deleted_by_newest && Some(*archive) == newest {
                continue;
            }
            report.check("2 archived once", may_have_kept(*archive, row), || Violation {
                row: Some((Table::Audit, *id)),
                at_us: pruned_at.get(archive).map(|p| p.0),
                ..violation(format!(
                    "audit {id} is in archive {archive} ({} copies), whose prune kept it though it was eligible and never held",
                    copies.len()
                ))
            });
        }
        if !deleted_by_newest || row.app_delete.is_some() {
            continue;
        }
        // Deleted through its newest archive: held, eligible, consistent.
        let Some((archive, last)) = copies.iter().max_by_key(|(a, _)| *a) else {
            continue;
        };
        let Some((at, policy, version)) = pruned_at.get(archive).cloned() else {
            continue;
        };
        report.check(
            "6 rows as written",
            row.possible_versions().contains(&last.version),
            || Violation {
                row: Some((Table::Audit, *id)),
                at_us: Some(at),
                ..violation(format!(
                    "audit {id} was deleted as version {} but its last version is {:?}",
                    last.version,
                    row.possible_versions()
                ))
            },
        );
        if let Some(hold) = held_at(Table::Audit, row.subject, at) {
            report.check("1 held rows stay", false, || Violation {
                row: Some((Table::Audit, *id)),
                subject: Some(row.subject),
                at_us: Some(at),
                ..violation(format!(
                    "audit {id} was pruned (archive {archive}) while hold {hold} covered it"
                ))
            });
        } else {
            report.check("1 held rows stay", true, || violation(String::new()));
        }
        if let Some(w) = version.and_then(|v| window.get(&(policy.clone().unwrap_or_default(), v)))
        {
            report.check(
                "5 nothing deleted before eligible",
                row.created_us < at - w && !last.open,
                || Violation {
                    row: Some((Table::Audit, *id)),
                    at_us: Some(at),
                    ..violation(format!(
                        "audit {id} pruned at age {:.2}s (open: {}) under a window of {:.0}s",
                        (at - row.created_us) as f64 / 1e6,
                        last.open,
                        *w as f64 / 1e6
                    ))
                },
            );
        }
    }

    // Every row that left: by the application, a sweep, an archive, or an erasure.
    for ((table, id), row) in &shadow {
        if live.contains_key(&(*table, *id)) {
            continue;
        }
        let by_app = row.app_delete.is_some();
        let by_retention = match table {
            Table::Events => swept.contains_key(id),
            Table::Audit => in_slices.contains_key(id),
        };
        let erased = erased_at(row.subject).is_some();
        let uncertain = row.insert == Outcome::Unknown;
        report.check("2 every row that left is accounted for", by_app || by_retention || erased || uncertain, || Violation {
            row: Some((*table, *id)),
            subject: Some(row.subject),
            ..violation(format!("{} {id} is gone, and no sweep, archive, erasure or application delete explains it", table.name()))
        });
        // The swept table's keys are exact; an archive also holds the rows its prune kept (their
        // copies are judged above).
        if let (Some((Outcome::Done, sent)), Table::Events, true) =
            (row.app_delete, table, by_retention)
        {
            report.check("4 ledger equals rows that left", false, || Violation {
                row: Some((*table, *id)),
                at_us: Some(sent),
                ..violation(format!("{} {id} was deleted by the application and also ledgered as deleted by retention", table.name()))
            });
        }
        if let Some((Outcome::Done, sent)) = row.app_delete {
            if let Some(h) = holds.iter().find(|h| {
                h.enforced
                    && h.table == *table
                    && h.subject == row.subject
                    && surely_in_force(h.placed_us, h.lift_sent_us, sent)
            }) {
                report.check("1 held rows stay", false, || Violation {
                    row: Some((*table, *id)),
                    at_us: Some(sent),
                    ..violation(format!(
                        "enforced hold {} let the application delete {} {id}",
                        h.id,
                        table.name()
                    ))
                });
            }
        }
    }

    // Counts: the ledger against the rows that left, per table.
    for table in Table::ALL {
        let erased_ledgered: i64 = ledger
            .iter()
            .filter(|l| l.method == "erasure" && l.relation == table.name())
            .map(|l| l.rows_deleted)
            .sum();
        let by_retention: i64 = match table {
            Table::Events => ledger
                .iter()
                .filter(|l| l.method == "prune" && l.relation == "events")
                .map(|l| l.rows_deleted)
                .sum(),
            Table::Audit => archived_deleted,
        };
        let ledgered_prunes: i64 = ledger
            .iter()
            .filter(|l| l.method == "prune" && l.relation == table.name())
            .map(|l| l.rows_deleted)
            .sum();
        let (mut least, mut most) = (0i64, 0i64);
        for ((t, id), row) in &shadow {
            if *t != table || live.contains_key(&(*t, *id)) {
                continue;
            }
            let sure = row.insert == Outcome::Done;
            match row.app_delete {
                Some((Outcome::Done, _)) => {}
                Some((Outcome::Unknown, _)) => most += 1,
                None if sure => {
                    least += 1;
                    most += 1;
                }
                None => most += 1,
            }
        }
        let total = by_retention + erased_ledgered;
        report.figures.insert(
            if table == Table::Events {
                "events_rows_erased"
            } else {
                "audit_rows_erased"
            },
            erased_ledgered,
        );
        report.check("4 ledger equals rows that left", least <= total && total <= most, || {
            violation(format!(
                "{}: the ledger says {total} rows left ({by_retention} by retention, {erased_ledgered} erased), the writers' shadow says between {least} and {most}",
                table.name()
            ))
        });
        if table == Table::Audit {
            report.check("4 ledger equals rows that left", ledgered_prunes == archived_deleted, || {
                violation(format!("audit: prune entries count {ledgered_prunes} rows, archives record {archived_deleted} deleted"))
            });
        }
    }

    // The writers and the driver.
    if let Ok(log) = world.log.lock() {
        for ev in log.iter().filter(|e| e.kind == "floor_broken") {
            report.check("8 floors hold", false, || violation(ev.text.clone()));
        }
        let refused = log
            .iter()
            .filter(|e| e.kind == "alter_below_floor_refused")
            .count();
        *report.checks.entry("8 floors hold").or_default() += refused as u64;
    }
    Ok(report)
}
