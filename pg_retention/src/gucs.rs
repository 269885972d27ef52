//! Every `pg_retention.*` setting, in one place. Each is reloadable with SIGHUP
//! (`pg_reload_conf()`); the background worker re-reads them between cycles.

use pgrx::guc::{GucContext, GucFlags, GucRegistry, GucSetting};
use std::ffi::CString;

/// `pg_retention.enabled` (bool, default off): nothing is swept by the worker until an operator
/// turns this on.
static ENABLED: GucSetting<bool> = GucSetting::<bool>::new(false);
/// `pg_retention.databases` (comma list, default empty; `*`: every database that accepts
/// connections): databases the workers serve.
static DATABASES: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);
/// `pg_retention.max_workers` (default 3): the most database workers visiting at once.
static MAX_WORKERS: GucSetting<i32> = GucSetting::<i32>::new(3);
/// `pg_retention.max_visit_time` (seconds, default 60): how long one visit to a database may
/// sweep before it leaves the rest of the cycle to the next visit.
static MAX_VISIT_TIME_S: GucSetting<i32> = GucSetting::<i32>::new(60);
/// `pg_retention.naptime` (seconds, default 3600 = 1h): pause between worker cycles.
static NAPTIME_S: GucSetting<i32> = GucSetting::<i32>::new(3600);
/// `pg_retention.jitter` (fraction 0..1 of naptime, default 0.1): a per-database offset, derived
/// deterministically from the database name, added to the naptime so a fleet does not stampede.
static JITTER: GucSetting<f64> = GucSetting::<f64>::new(0.1);
/// `pg_retention.max_rows_per_cycle` (rows, default 1,000,000): the cycle cap.
static MAX_ROWS_PER_CYCLE: GucSetting<i32> = GucSetting::<i32>::new(1_000_000);
/// `pg_retention.drop_lock_timeout` (milliseconds, default 50): how long retiring a whole
/// partition waits for each of its locks (the partitioned table's ACCESS EXCLUSIVE among them)
/// before it gives up until the next run, so writers queue behind it for at most this long; and
/// how long a step goes on proving leaves before it drops the proven ones.
static DROP_LOCK_TIMEOUT_MS: GucSetting<i32> = GucSetting::<i32>::new(50);
/// `pg_retention.step_timeout` (milliseconds, default 300000 = 5 min; 0: none): the most one
/// step of a worker's run (its start, each batch, its close) may take. The database's
/// `statement_timeout`, when lower, bounds it too. A step past it is cancelled, ledgered as an
/// error (57014) and ends that policy's run; the worker goes on with the next policy.
static STEP_TIMEOUT_MS: GucSetting<i32> = GucSetting::<i32>::new(300_000);
/// `pg_retention.max_replica_lag` (milliseconds, default 60000 = 1 min; 0 turns it off): a
/// sweep pauses between steps while any streaming replica's replay lag exceeds it.
static MAX_REPLICA_LAG_MS: GucSetting<i32> = GucSetting::<i32>::new(60_000);
/// `pg_retention.max_wal_rate` (kilobytes per second, default 0 = unlimited): the WAL the steps
/// of all sweeps of a database may write, token-bucketed with a one-second burst.
static MAX_WAL_RATE_KB: GucSetting<i32> = GucSetting::<i32>::new(0);
/// `pg_retention.adaptive_pacing` (bool, default on): before each step a sweep waits until the
/// WAL of the step before the last is on disk, sleeps for the wait's overrun of the target, and
/// sizes its steps from that wait.
static ADAPTIVE_PACING: GucSetting<bool> = GucSetting::<bool>::new(true);
/// `pg_retention.pacing_flush_target` (milliseconds, default 1): the flush wait per step that
/// adaptive pacing sizes steps for.
static PACING_FLUSH_TARGET_MS: GucSetting<f64> = GucSetting::<f64>::new(1.0);
/// `pg_retention.role` (role name, default empty = bootstrap superuser): the role the worker
/// connects as.
static ROLE: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);

/// Registers the settings and reserves the prefix so a misspelt `pg_retention.*` is refused.
pub fn init() {
    GucRegistry::define_bool_guc(
        c"pg_retention.enabled",
        c"Whether the pg_retention background worker sweeps.",
        c"Off by default: installing the extension changes nothing until an operator enables it.",
        &ENABLED,
        GucContext::Sighup,
        GucFlags::default(),
    );
    GucRegistry::define_string_guc(
        c"pg_retention.databases",
        c"Comma-separated databases the pg_retention workers serve ('*': every database).",
        c"A pool of pg_retention.max_workers workers visits each served database in turn.",
        &DATABASES,
        GucContext::Sighup,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"pg_retention.max_workers",
        c"The most pg_retention database workers visiting databases at once.",
        c"Each counts against max_worker_processes, as does the launcher.",
        &MAX_WORKERS,
        1,
        64,
        GucContext::Sighup,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"pg_retention.max_visit_time",
        c"How long one worker visit to a database may sweep.",
        c"Past it the visit stops between two steps; the next visit goes on where it stopped.",
        &MAX_VISIT_TIME_S,
        1,
        i32::MAX,
        GucContext::Sighup,
        GucFlags::UNIT_S,
    );
    GucRegistry::define_int_guc(
        c"pg_retention.naptime",
        c"Pause between worker cycles.",
        c"Accepts units (e.g. '1h', '30s'); default one hour.",
        &NAPTIME_S,
        1,
        i32::MAX,
        GucContext::Sighup,
        GucFlags::UNIT_S,
    );
    GucRegistry::define_float_guc(
        c"pg_retention.jitter",
        c"Fraction of the naptime added as a per-database, deterministic offset.",
        c"0 disables jitter; 0.1 spreads a fleet over a tenth of the naptime.",
        &JITTER,
        0.0,
        1.0,
        GucContext::Sighup,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"pg_retention.max_rows_per_cycle",
        c"Most rows one worker cycle deletes before it stops and warns.",
        c"The cycle cap: a bound that does not trust the clock.",
        &MAX_ROWS_PER_CYCLE,
        1,
        i32::MAX,
        GucContext::Sighup,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"pg_retention.drop_lock_timeout",
        c"How long retiring a whole partition waits for its locks.",
        c"A partition whose locks are not granted in time is skipped (ledgered) and retried next run.",
        &DROP_LOCK_TIMEOUT_MS,
        1,
        60_000,
        GucContext::Suset,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_int_guc(
        c"pg_retention.step_timeout",
        c"The most one step of a worker's run may take (0: no bound but statement_timeout).",
        c"A step past it is cancelled and ledgered as an error; the worker goes on with the next policy.",
        &STEP_TIMEOUT_MS,
        0,
        i32::MAX,
        GucContext::Sighup,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_int_guc(
        c"pg_retention.max_replica_lag",
        c"Sweeps pause between steps while a streaming replica's replay lags more than this.",
        c"0 turns the check off. Pauses are ledgered (method pause) and shown in retention.workers.",
        &MAX_REPLICA_LAG_MS,
        0,
        i32::MAX,
        GucContext::Suset,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_int_guc(
        c"pg_retention.max_wal_rate",
        c"WAL per second the sweeps of a database may write (token bucket, one second of burst).",
        c"0 means unlimited. Accepts units, e.g. '8MB' (per second).",
        &MAX_WAL_RATE_KB,
        0,
        i32::MAX,
        GucContext::Suset,
        GucFlags::UNIT_KB,
    );
    GucRegistry::define_bool_guc(
        c"pg_retention.adaptive_pacing",
        c"Sweeps stay within one step of the disk's WAL flush, yield it when slow, and size steps from it.",
        c"On by default; off runs steps of the policy's batch_size back to back.",
        &ADAPTIVE_PACING,
        GucContext::Suset,
        GucFlags::default(),
    );
    GucRegistry::define_float_guc(
        c"pg_retention.pacing_flush_target",
        c"The WAL flush wait per sweep step that adaptive pacing sizes steps for.",
        c"In milliseconds: steps shrink while their flush takes longer and grow while it takes under half.",
        &PACING_FLUSH_TARGET_MS,
        0.1,
        10_000.0,
        GucContext::Suset,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_string_guc(
        c"pg_retention.role",
        c"Role the pg_retention worker acts as.",
        c"Empty means the bootstrap superuser.",
        &ROLE,
        GucContext::Sighup,
        GucFlags::default(),
    );
    // Safety: called once from _PG_init, in the postmaster or a backend, before any lookup.
    unsafe { pgrx::pg_sys::MarkGUCPrefixReserved(c"pg_retention".as_ptr()) };
}

/// Whether the worker is enabled.
pub fn enabled() -> bool {
    ENABLED.get()
}

/// Databases to serve, trimmed, empty entries dropped.
pub fn databases() -> Vec<String> {
    DATABASES
        .get()
        .map(|c| {
            c.to_string_lossy()
                .split(',')
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
                .collect()
        })
        .unwrap_or_default()
}

/// Whether every database is served (`pg_retention.databases = '*'`).
pub fn all_databases() -> bool {
    databases().iter().any(|d| d == "*")
}

/// The most workers visiting at once.
pub fn max_workers() -> usize {
    usize::try_from(MAX_WORKERS.get()).unwrap_or(1).max(1)
}

/// The visit bound in seconds.
pub fn max_visit_time_secs() -> u64 {
    u64::try_from(MAX_VISIT_TIME_S.get()).unwrap_or(1).max(1)
}

/// Naptime in seconds.
pub fn naptime_secs() -> u64 {
    NAPTIME_S.get().max(1) as u64
}

/// Jitter fraction.
pub fn jitter() -> f64 {
    JITTER.get()
}

/// The cycle cap in rows.
pub fn max_rows_per_cycle() -> i64 {
    i64::from(MAX_ROWS_PER_CYCLE.get())
}

/// The lock timeout of a whole-partition drop, in milliseconds.
pub fn drop_lock_timeout_ms() -> i32 {
    DROP_LOCK_TIMEOUT_MS.get()
}

/// How long one step of a worker's run may take, in milliseconds (0: no bound): the lower of
/// `pg_retention.step_timeout` and `statement_timeout` where either is set.
pub fn step_timeout_ms() -> i32 {
    // Safety: reads a backend-local setting.
    let statement = unsafe { pgrx::pg_sys::StatementTimeout };
    match (STEP_TIMEOUT_MS.get(), statement) {
        (0, s) => s,
        (t, 0) => t,
        (t, s) => t.min(s),
    }
}

/// The replay lag past which sweeps pause, in milliseconds (0: never).
pub fn max_replica_lag_ms() -> i64 {
    i64::from(MAX_REPLICA_LAG_MS.get())
}

/// The WAL rate of a database's sweeps in bytes per second (0: unlimited).
pub fn max_wal_rate_bytes() -> i64 {
    i64::from(MAX_WAL_RATE_KB.get()) * 1024
}

/// Whether adaptive pacing is on.
pub fn adaptive_pacing() -> bool {
    ADAPTIVE_PACING.get()
}

/// The flush wait per step adaptive pacing aims for, in milliseconds.
pub fn pacing_flush_target_ms() -> f64 {
    PACING_FLUSH_TARGET_MS.get()
}

/// The role the worker acts as, if set.
pub fn role() -> Option<String> {
    ROLE.get()
        .map(|c| c.to_string_lossy().into_owned())
        .filter(|s| !s.is_empty())
}
