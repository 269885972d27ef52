//! Sessions and calls: connecting with the fuzzing limits, running one call with hang
//! detection, and watching the server's epoch (crash or restart) and reconnecting.

use super::*;

/// Connects as `role` with the fuzzing limits; `seq` names the session (application_name).
pub(super) fn fuzz_session(c: &Cluster, role: &str, seq: usize) -> Result<Client, postgres::Error> {
    let mut config: Config = format!("{} user={role}", c.url("postgres"))
        .parse()
        .expect("connection string");
    config
        .application_name(&format!("fuzz-{seq}"))
        .options(&format!(
            "-c statement_timeout={STATEMENT_TIMEOUT} -c lock_timeout=2s \
             -c idle_in_transaction_session_timeout=10s"
        ))
        .connect_timeout(Duration::from_secs(10));
    config.connect(NoTls)
}

/// How one call ended.
pub(super) enum Answer {
    Ok,
    /// A typed error from the server.
    Error {
        code: String,
        severity: String,
        message: String,
    },
    /// The connection failed or was lost (no server error).
    Lost(String),
    /// No answer within [`HANG_AFTER`].
    Hang,
}

/// Runs `sql` as the fuzzer in a session of its own, cancelling and then terminating it when
/// it hangs.
pub(super) fn call(c: &Cluster, sql: &str, seq: usize, monitor: &mut Option<Client>) -> Answer {
    let mut session = match fuzz_session(c, FUZZER, seq) {
        Ok(s) => s,
        Err(e) => return Answer::Lost(format!("connect: {e}")),
    };
    let cancel = session.cancel_token();
    let (tx, rx) = mpsc::channel();
    let owned = sql.to_owned();
    std::thread::spawn(move || {
        let result = session.batch_execute(&owned);
        let _ = tx.send(result);
    });
    let result = match rx.recv_timeout(HANG_AFTER) {
        Ok(r) => r,
        Err(_) => {
            let _ = cancel.cancel_query(NoTls);
            if rx.recv_timeout(Duration::from_secs(5)).is_err() {
                if let Some(m) = monitor.as_mut() {
                    let _ = m.execute(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                          WHERE application_name = $1",
                        &[&format!("fuzz-{seq}")],
                    );
                }
                // Give it a moment to go; a thread that never returns is left behind.
                let _ = rx.recv_timeout(Duration::from_secs(5));
            }
            return Answer::Hang;
        }
    };
    match result {
        Ok(()) => Answer::Ok,
        Err(e) => match e.as_db_error() {
            Some(db) => Answer::Error {
                code: db.code().code().to_owned(),
                severity: db.severity().to_owned(),
                message: db.message().to_owned(),
            },
            None => Answer::Lost(e.to_string()),
        },
    }
}

/// What identifies one life of the server: the postmaster's start time (a restart) and the
/// checkpointer's pid (a crash and reinitialisation: the postmaster's start time stays).
pub(super) fn server_epoch(monitor: &mut Client) -> Option<(String, i32)> {
    monitor
        .query_one(
            "SELECT pg_postmaster_start_time()::text,
                    (SELECT pid FROM pg_stat_activity WHERE backend_type = 'checkpointer')",
            &[],
        )
        .ok()
        .map(|r| (r.get(0), r.get::<_, Option<i32>>(1).unwrap_or(0)))
}

/// A superuser session once the server accepts connections again (up to a minute).
pub(super) fn reconnect(c: &Cluster) -> Option<Client> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(mut m) = fuzz_session(c, "postgres", 0) {
            if m.batch_execute("SET statement_timeout = 0").is_ok() {
                return Some(m);
            }
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}
