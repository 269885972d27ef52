//! Judging and reporting: which answers are failures, crash lines of the server log, and
//! the table of failures printed at the end.

use super::*;

/// Substrings of a message that mean a Rust panic or an assertion got through.
const PANIC_WORDS: [&str; 8] = [
    "panicked",
    "panic",
    "unwrap()",
    "index out of bounds",
    "attempt to add with overflow",
    "attempt to subtract with overflow",
    "attempt to multiply with overflow",
    "RUST_BACKTRACE",
];

/// One failing call.
pub(super) struct Failure {
    pub(super) function: String,
    pub(super) args: String,
    pub(super) sqlstate: String,
    pub(super) message: String,
}

/// The first line of `message`, cut to 200 characters.
pub(super) fn first_line(message: &str) -> String {
    let line = message.lines().next().unwrap_or_default();
    match line.char_indices().nth(200) {
        Some((end, _)) => format!("{}…", &line[..end]),
        None => line.to_owned(),
    }
}

/// Why an answer is a failure, if it is one: (sqlstate column, message column).
pub(super) fn judge(answer: &Answer) -> Option<(String, String)> {
    match answer {
        Answer::Ok => None,
        Answer::Error {
            code,
            severity,
            message,
        } => {
            let first = first_line(message);
            let lower = message.to_lowercase();
            if code.starts_with("XX") {
                Some((code.clone(), first))
            } else if severity == "FATAL" || severity == "PANIC" {
                Some((code.clone(), format!("{severity}: {first}")))
            } else if PANIC_WORDS
                .iter()
                .any(|w| lower.contains(&w.to_lowercase()))
            {
                Some((code.clone(), format!("panic-like: {first}")))
            } else {
                None
            }
        }
        Answer::Lost(e) => Some((
            "(lost)".into(),
            format!("connection lost: {}", first_line(e)),
        )),
        Answer::Hang => Some((
            "(hang)".into(),
            format!(
                "no answer within {}s despite statement_timeout = {STATEMENT_TIMEOUT}",
                HANG_AFTER.as_secs()
            ),
        )),
    }
}

/// Lines of the server log that tell of a crash.
pub(super) fn crash_lines(log: &str) -> Vec<String> {
    log.lines()
        .filter(|l| {
            l.contains("terminated by signal")
                || l.contains("PANIC:")
                || l.contains("TRAP:")
                || l.contains("was terminated by exception")
        })
        .map(str::to_owned)
        .collect()
}

/// Prints the failures as one table, grouped by function.
pub(super) fn print_failures(failures: &[Failure], routines: &[Routine]) {
    let mut by_function: BTreeMap<&str, Vec<&Failure>> = BTreeMap::new();
    for f in failures {
        by_function.entry(&f.function).or_default().push(f);
    }
    println!(
        "\n{} failing calls in {} functions:",
        failures.len(),
        by_function.len()
    );
    println!("| function | args | sqlstate | message |");
    println!("|---|---|---|---|");
    for (function, list) in &by_function {
        let identity = routines
            .iter()
            .find(|r| r.name == *function)
            .map_or("", |r| r.identity.as_str());
        println!(
            "| **{function}**({identity}) | {} failures | | |",
            list.len()
        );
        for f in list {
            println!(
                "| {} | {} | {} | {} |",
                f.function,
                f.args.replace('|', "\\|"),
                f.sqlstate,
                f.message.replace('|', "\\|")
            );
        }
    }
}
