//! The seeded chaos run (`scripts/chaos --seed N --minutes M`): a real cluster with a streaming
//! standby, SeaweedFS, the background worker, archivers and application writers, while a driver
//! at random points places and lifts holds, erases subjects, alters policies, runs consumers and
//! injects faults. Then the invariant checker (checker/) proves from the database, the store
//! and the writers' shadow that nothing was lost, kept wrongly or deleted wrongly. A failure
//! prints the seed and, for each violation, the events that concern it.
//!
//! Production roles throughout: `app` writes (table privileges only), `admin` manages policies
//! and holds, `dpo` erases, `reader` reports the consumer's position, the archivers run as a
//! role only in `retention_archiver`, `restore` as `restorer`; the superuser sets up and reads
//! the catalog for the checks.

mod archivers;
mod checker;
mod driver;
mod readback;
mod rng;
mod sabotage;
mod world;
mod writers;

use pg_retention_integration::archiver::Archiver;
use pg_retention_integration::{Cluster, Seaweed};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};
use world::{now_us, What, World};

const USAGE: &str = "usage: chaos [--seed N] [--minutes M] [--writers N] [--archivers N] [--no-standby] [--no-faults] [--sabotage KIND,...]";

struct Args {
    seed: u64,
    minutes: f64,
    writers: usize,
    archivers: usize,
    standby: bool,
    faults: bool,
    sabotage: Vec<String>,
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        seed: (now_us() as u64) % 1_000_000,
        minutes: 2.0,
        writers: 3,
        archivers: 3,
        standby: true,
        faults: true,
        sabotage: Vec::new(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || {
            it.next()
                .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))
        };
        match flag.as_str() {
            "--seed" => a.seed = value()?.parse().map_err(|e| format!("--seed: {e}"))?,
            "--minutes" => a.minutes = value()?.parse().map_err(|e| format!("--minutes: {e}"))?,
            "--writers" => a.writers = value()?.parse().map_err(|e| format!("--writers: {e}"))?,
            "--archivers" => {
                a.archivers = value()?.parse().map_err(|e| format!("--archivers: {e}"))?
            }
            "--no-standby" => a.standby = false,
            "--no-faults" => a.faults = false,
            "--sabotage" => a.sabotage = value()?.split(',').map(str::to_owned).collect(),
            "-h" | "--help" => return Err(USAGE.to_owned()),
            other => return Err(format!("unknown argument {other}\n{USAGE}")),
        }
    }
    if a.minutes <= 0.0 || a.writers == 0 || a.archivers == 0 {
        return Err(format!(
            "--minutes, --writers and --archivers must be positive\n{USAGE}"
        ));
    }
    Ok(a)
}

const SCHEMA: &str = "
CREATE FUNCTION chaos_note(id bigint, v int) RETURNS text LANGUAGE sql IMMUTABLE
    AS $$ SELECT 'n' || id || 'v' || v $$;
CREATE FUNCTION chaos_amount(id bigint, v int) RETURNS numeric LANGUAGE sql IMMUTABLE
    AS $$ SELECT round(((id * 7 + v) % 100000) / 100.0, 2) $$;
CREATE FUNCTION chaos_body(id bigint, v int) RETURNS jsonb LANGUAGE sql IMMUTABLE
    AS $$ SELECT jsonb_build_object('ip', '10.' || id % 250 || '.' || v % 250 || '.1', 'v', v,
                                    'note', repeat(chr(97 + (id % 26)::int), 60)) $$;
CREATE TABLE events (id bigint PRIMARY KEY, subject int NOT NULL, created_at timestamptz NOT NULL,
                     note text NOT NULL, version int NOT NULL);
CREATE INDEX ON events (created_at);
CREATE TABLE audit (id bigint PRIMARY KEY, subject int NOT NULL, created_at timestamptz NOT NULL,
                    state text NOT NULL, amount numeric(12,2) NOT NULL, body jsonb NOT NULL,
                    version int NOT NULL);
CREATE INDEX ON audit (created_at);
CREATE ROLE dpo LOGIN;
GRANT retention_eraser TO dpo;
GRANT SELECT, DELETE ON events, audit TO dpo;
CREATE ROLE reader LOGIN;
GRANT retention_consumer TO reader;
GRANT SELECT ON events TO reader;
";

const POLICIES: &str = "
SELECT retention.add_policy(name => 'events', relation => 'events', kind => 'age',
       age_column => 'created_at', older_than => '20 seconds', order_by => 'id', batch_size => 200,
       record_keys => true, window_floor => '10 seconds');
SELECT retention.add_policy(name => 'audit', relation => 'audit', kind => 'age',
       age_column => 'created_at', older_than => '20 seconds', terminal => $$state = 'closed'$$,
       action => 'archive_then_delete', window_floor => '10 seconds');
";

fn main() -> ExitCode {
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    println!(
        "chaos: seed {} for {} minutes: {} writers, {} archivers, standby {}, faults {}",
        args.seed, args.minutes, args.writers, args.archivers, args.standby, args.faults
    );
    let log_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../target/chaos")
        .join(format!("seed-{}", args.seed));
    let _ = std::fs::remove_dir_all(&log_dir);
    if let Err(e) = std::fs::create_dir_all(&log_dir) {
        eprintln!("chaos: cannot make {}: {e}", log_dir.display());
        return ExitCode::from(2);
    }

    let primary = Cluster::start(&[
        "synchronous_commit = on",
        "wal_keep_size = '1GB'",
        "pg_retention.enabled = on",
        "pg_retention.naptime = '2s'",
        "pg_retention.databases = 'postgres'",
    ]);
    primary.execute("postgres", SCHEMA);
    primary.grant_app_and_admin("postgres");
    if let Err(e) = primary.admin("postgres").batch_execute(POLICIES) {
        eprintln!("chaos: policies: {e}");
        return ExitCode::from(2);
    }
    let _ = primary.archiver_url("postgres");
    let standby = args
        .standby
        .then(|| Arc::new(primary.standby_with(&["shared_preload_libraries = 'pg_retention'"])));
    let store = Seaweed::start("archive");
    let endpoint = store.endpoint();
    let mut rng = rng::Rng::new(args.seed);

    let world = World {
        seed: args.seed,
        t0: Instant::now(),
        primary: RwLock::new(Arc::new(primary)),
        standby: Mutex::new(standby),
        retired: Mutex::new(Vec::new()),
        store: Mutex::new(store),
        gate: RwLock::new(()),
        erased: RwLock::new(HashSet::new()),
        stop: AtomicBool::new(false),
        log: Mutex::new(Vec::new()),
        shadow: Mutex::new(HashMap::new()),
        holds: Mutex::new(Vec::new()),
        consumers: Mutex::new(Vec::new()),
        erasures: Mutex::new(BTreeMap::new()),
        next_id: AtomicI64::new(1),
        counts: Mutex::new(BTreeMap::new()),
    };
    let slots: Vec<Arc<archivers::Slot>> = (0..args.archivers)
        .map(|i| Arc::new(archivers::Slot::new(i)))
        .collect();
    let duration = Duration::from_secs_f64(args.minutes * 60.0);
    let options = driver::Options {
        faults: args.faults,
        duration,
        promote_after: (args.standby && args.faults)
            .then(|| duration.mul_f64(0.3 + 0.4 * (rng.below(1000) as f64 / 1000.0))),
    };
    // The archiver as built now, copied: a rebuild during a long run does not change it.
    let program = log_dir.join("pg-retention-archiver");
    if let Err(e) = std::fs::copy(pg_retention_integration::archiver::binary(), &program) {
        eprintln!("chaos: cannot copy the archiver: {e}");
        return ExitCode::from(2);
    }

    let outcome = std::thread::scope(|scope| {
        let world = &world;
        let supervisors: Vec<_> = slots
            .iter()
            .map(|slot| {
                let (slot, endpoint, log_dir, program) = (
                    slot.clone(),
                    endpoint.clone(),
                    log_dir.clone(),
                    program.clone(),
                );
                scope.spawn(move || {
                    archivers::supervise(world, &slot, &endpoint, &log_dir, &program)
                })
            })
            .collect();
        let mut actors: Vec<_> = (0..args.writers)
            .map(|_| {
                let r = rng.fork();
                scope.spawn(move || writers::run(world, r, 40))
            })
            .collect();
        let r = rng.fork();
        let (slots_ref, options_ref) = (&slots, &options);
        actors.push(scope.spawn(move || driver::run(world, r, slots_ref, options_ref)));

        let start = Instant::now();
        while start.elapsed() < duration {
            std::thread::sleep(
                Duration::from_secs(1).min(duration.saturating_sub(start.elapsed())),
            );
            if start.elapsed().as_secs().is_multiple_of(30) {
                progress(world);
            }
            // A writer or the driver that panicked would leave a run without its faults.
            if actors.iter().any(|a| a.is_finished()) {
                eprintln!("chaos: a writer or the driver stopped early (its panic is above); the run ends");
                break;
            }
        }
        world.stop.store(true, Ordering::SeqCst);
        let mut harness_failed = false;
        for a in actors {
            harness_failed |= a.join().is_err();
        }
        let quiet = quiesce(world);
        for slot in &slots {
            slot.retire.store(true, Ordering::SeqCst);
        }
        for s in supervisors {
            harness_failed |= s.join().is_err();
        }
        (harness_failed, quiet)
    });
    let (harness_failed, quiet) = outcome;
    progress(&world);
    write_log(&world, &log_dir);
    if harness_failed {
        println!(
            "chaos: a thread of the harness panicked (seed {}); see above",
            args.seed
        );
        return ExitCode::from(2);
    }

    if let Err(e) = sabotage::commit(&world, &args.sabotage) {
        println!("chaos: sabotage failed: {e}");
        return ExitCode::from(2);
    }
    let primary = world.primary();
    let mut db = primary.connect("postgres");
    let mut restorer = Archiver::on_s3(&primary.restorer_url("postgres"), &endpoint);
    restorer.program = Some(program.clone());
    let report = match checker::check(&world, &mut db, &restorer) {
        Ok(r) => r,
        Err(e) => {
            println!("chaos: the checker could not run: {e} (seed {})", args.seed);
            return ExitCode::from(2);
        }
    };
    summary(&world, &report, &quiet);
    if report.violations.is_empty() && quiet.is_ok() {
        println!("chaos: seed {}: every invariant held", args.seed);
        ExitCode::SUCCESS
    } else {
        if let Err(e) = &quiet {
            println!("chaos: the archivers did not finish: {e}");
        }
        for v in &report.violations {
            println!("\nVIOLATION [{}] {}", v.invariant, v.text);
            print_trace(&world, v);
        }
        println!(
            "\nchaos: seed {}: {} invariant violations (rerun: scripts/chaos {})",
            args.seed,
            report.violations.len(),
            std::env::args().skip(1).collect::<Vec<_>>().join(" ")
        );
        ExitCode::FAILURE
    }
}

/// Waits until no batch is claimed and no supersession is pending: everything the archivers
/// started is finished.
fn quiesce(world: &World) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut last = String::new();
    while Instant::now() < deadline {
        let primary = world.primary();
        if let Ok(mut db) = postgres::Client::connect(&primary.url("postgres"), postgres::NoTls) {
            if let Ok(row) = db.query_one(
                "SELECT (SELECT count(*) FROM retention.batches WHERE state = 'claimed'),
                        (SELECT count(*) FROM retention.supersessions WHERE state IN ('pending', 'rewritten'))",
                &[],
            ) {
                let (claimed, open): (i64, i64) = (row.get(0), row.get(1));
                if claimed == 0 && open == 0 {
                    return Ok(());
                }
                last = format!("{claimed} batches claimed, {open} supersessions open");
            }
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    world.event("not_quiet", What::Fault, last.clone());
    Err(last)
}

fn progress(world: &World) {
    let counts = world.counts.lock().map(|c| c.clone()).unwrap_or_default();
    let faults: u64 = counts
        .iter()
        .filter(|(k, _)| k.starts_with("fault_"))
        .map(|(_, v)| v)
        .sum();
    println!(
        "chaos: {:>6.0}s  inserted {} updated {} app-deleted {}  holds {} erasures {} faults {} archiver exits {}",
        world.elapsed(),
        counts.get("rows_inserted").unwrap_or(&0),
        counts.get("rows_updated").unwrap_or(&0),
        counts.get("rows_app_deleted").unwrap_or(&0),
        counts.get("hold_place").unwrap_or(&0),
        counts.get("erase").unwrap_or(&0),
        faults,
        counts.get("archiver_exit").unwrap_or(&0),
    );
    let _ = std::io::stdout().flush();
}

fn summary(world: &World, report: &checker::Report, quiet: &Result<(), String>) {
    let counts = world.counts.lock().map(|c| c.clone()).unwrap_or_default();
    let events: u64 = world.log.lock().map(|l| l.len() as u64).unwrap_or(0);
    println!(
        "\n== chaos seed {}: {:.0} s, {events} events",
        world.seed,
        world.elapsed()
    );
    println!("events by kind:");
    for (k, v) in &counts {
        println!("  {k:<28} {v}");
    }
    println!("figures from the database and the store:");
    for (k, v) in &report.figures {
        println!("  {k:<28} {v}");
    }
    println!("checks made, by invariant:");
    for (k, v) in &report.checks {
        println!("  {k:<44} {v}");
    }
    println!("archivers finished their work: {}", quiet.is_ok());
}

/// The events that concern a violation: its row's writes, holds and erasures of its subject,
/// and the faults and policy changes in the half minute before it.
fn print_trace(world: &World, v: &checker::Violation) {
    let subject = v.subject.or_else(|| {
        let (table, id) = v.row?;
        world
            .shadow
            .lock()
            .ok()?
            .get(&(table, id))
            .map(|r| r.subject)
    });
    let Ok(log) = world.log.lock() else { return };
    let t0 = log.first().map_or(0, |e| e.wall_us);
    println!("  trace (seed {}, seconds from the start):", world.seed);
    let mut shown = 0;
    for e in log.iter() {
        let relevant = match &e.what {
            What::Write(t, id) => v.row == Some((*t, *id)),
            What::Hold(t, s) => Some(*s) == subject && v.row.is_none_or(|(rt, _)| rt == *t),
            What::Erase(s) => Some(*s) == subject,
            What::Fault | What::Policy | What::Consumer => v
                .at_us
                .is_some_and(|at| e.wall_us > at - 30_000_000 && e.wall_us < at + 5_000_000),
        };
        if relevant && shown < 60 {
            shown += 1;
            println!("    {:>8.3}  {}", (e.wall_us - t0) as f64 / 1e6, e.text);
        }
    }
    if let Some(at) = v.at_us {
        println!("    {:>8.3}  <- the violation", (at - t0) as f64 / 1e6);
    }
}

fn write_log(world: &World, dir: &std::path::Path) {
    let Ok(log) = world.log.lock() else { return };
    let t0 = log.first().map_or(0, |e| e.wall_us);
    let text: String = log
        .iter()
        .map(|e| {
            format!(
                "{:>9.3} {:<24} {}\n",
                (e.wall_us - t0) as f64 / 1e6,
                e.kind,
                e.text
            )
        })
        .collect();
    let _ = std::fs::write(dir.join("events.log"), text);
}
