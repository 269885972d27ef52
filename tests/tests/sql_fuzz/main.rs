//! A fuzzer for the SQL surface: every function and procedure of the `retention` schema, public
//! or internal (`_`-prefixed), is called as an unprivileged member of every retention role with
//! many combinations of hostile, boundary and almost-right arguments. Any typed error is fine;
//! an internal error (SQLSTATE class XX), a panic surfacing in a message, a FATAL or PANIC, a
//! lost connection, a crashed or restarted server, or a call that ignores its statement timeout
//! is a failure. Every failure of the run is collected and printed as one table before the test
//! fails, so one run reports them all.
//!
//! The combinations are drawn with a fixed-seed PRNG, so a run is repeatable (set
//! `PG_RETENTION_FUZZ_SEED` to explore others): per routine all-NULL, all "sensible"
//! defaults, each argument alone through its whole value list with the others at their
//! defaults, and [`RANDOM_COMBINATIONS`] random draws (`PG_RETENTION_FUZZ_RANDOM` to change
//! that). `PG_RETENTION_FUZZ_VERBOSE=1` prints the answers of every routine by SQLSTATE.
//!
//! Run: `cargo test -p pg_retention_integration --test sql_fuzz -- --nocapture`.

use pg_retention_integration::{column, scalar, Cluster};
use postgres::{Client, Config, NoTls};
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The routines under test, read from the catalog.
mod catalog;
/// The argument combinations of a routine.
mod combinations;
/// The deterministic PRNG.
mod rng;
/// The fuzzing run's state and per-routine loop.
mod runner;
/// Sessions, calls with hang detection, and the server's epoch.
mod session;
/// The candidate values of each argument, by type and by name.
mod values;
/// Which answers are failures, and the report.
mod verdict;
/// The setup fixture (role, tables, policies, batches) and its restore.
mod world;

use catalog::{routines, Arg, Routine};
use combinations::{combinations, typed};
use rng::Rng;
use runner::Fuzz;
use session::{call, fuzz_session, reconnect, server_epoch, Answer};
use values::{begun_run, labelled, lit, live_batch, named_values, null, type_values, v, Then, Val};
use verdict::{crash_lines, first_line, judge, print_failures, Failure};
use world::{restore, setup, World};

/// Random argument combinations per routine with two or more arguments (unless
/// `PG_RETENTION_FUZZ_RANDOM` says otherwise).
const RANDOM_COMBINATIONS: usize = 20;
/// Server-side limit of one call.
const STATEMENT_TIMEOUT: &str = "5s";
/// How long a call may go unanswered before it counts as a hang (it was given
/// [`STATEMENT_TIMEOUT`]).
const HANG_AFTER: Duration = Duration::from_secs(20);
/// Wall-clock budget of one routine's calls; the rest are skipped (and reported) past it, so
/// one routine whose every call waits out its timeout cannot stall the run.
const ROUTINE_BUDGET: Duration = Duration::from_secs(40);
/// The seed when `PG_RETENTION_FUZZ_SEED` is not set.
const DEFAULT_SEED: u64 = 0x5EED_F022_2026_0001;
/// The unprivileged role every call runs as.
const FUZZER: &str = "fuzzer";
/// Stands for the call's sequence number in a value's SQL (fresh names).
const SEQ: &str = "{seq}";
/// Stands for the batch kept claimed (re-claimed after the calls that end it) in a value's SQL.
const LIVE: &str = "{live}";

#[test]
fn every_routine_survives_fuzzed_arguments_as_an_unprivileged_member_of_every_role() {
    let started = Instant::now();
    let env = |name: &str| std::env::var(name).ok().and_then(|s| s.parse().ok());
    let seed = env("PG_RETENTION_FUZZ_SEED").unwrap_or(DEFAULT_SEED);
    let random = env("PG_RETENTION_FUZZ_RANDOM").map_or(RANDOM_COMBINATIONS, |n| n as usize);
    let mut rng = Rng::new(seed);
    let c = Cluster::start(&[]);
    let world = setup(&c);
    let mut monitor = reconnect(&c).expect("the server is up");
    let all = routines(&mut monitor);
    assert!(all.len() > 40, "found {} routines", all.len());
    let superuser: Vec<String> = column(
        &mut monitor,
        "SELECT rolname::text FROM pg_roles WHERE rolsuper AND rolname = 'fuzzer'",
    );
    assert!(superuser.is_empty(), "the fuzzer must not be a superuser");
    let epoch = server_epoch(&mut monitor);
    let mut fuzz = Fuzz {
        c: &c,
        monitor: Some(monitor),
        epoch,
        live: world.live_batch.clone(),
        calls: 0,
        failures: Vec::new(),
        codes: BTreeMap::new(),
        verbose: std::env::var_os("PG_RETENTION_FUZZ_VERBOSE").is_some(),
    };
    let mut skipped = Vec::new();
    for routine in &all {
        let combos = combinations(routine, &world, &mut rng, random);
        let left = fuzz.routine(routine, &combos);
        if left > 0 {
            skipped.push(format!("{}: {left} of {}", routine.name, combos.len()));
        }
    }

    // The application tables the fuzzer could never drop are still there.
    let mut db = reconnect(&c).expect("the server is up");
    for table in ["fuzz_plain", "fuzz_enum", "fuzz_parted"] {
        let sql = format!("SELECT count(*) FROM pg_class WHERE relname = '{table}'");
        if scalar(&mut db, &sql) != 1 {
            let message = format!("table {table} no longer exists");
            fuzz.fail("(after the run)", "", "(gone)".into(), message);
        }
    }
    let crashes = crash_lines(&c.log());

    let functions: BTreeSet<&str> = all.iter().map(|r| r.name.as_str()).collect();
    println!(
        "fuzzed {} functions with {} calls in {:.0?} (seed {seed:#x})",
        functions.len(),
        fuzz.calls,
        started.elapsed()
    );
    println!("answers by SQLSTATE: {:?}", fuzz.codes);
    if !skipped.is_empty() {
        println!(
            "calls skipped past the {}s budget of a routine: {}",
            ROUTINE_BUDGET.as_secs(),
            skipped.join("; ")
        );
    }
    if !crashes.is_empty() {
        println!("server log crash lines:\n{}", crashes.join("\n"));
    }
    if !fuzz.failures.is_empty() {
        print_failures(&fuzz.failures, &all);
    }
    assert!(
        fuzz.failures.is_empty() && crashes.is_empty(),
        "{} failing calls and {} crash lines in the server log (table above)",
        fuzz.failures.len(),
        crashes.len()
    );
}
