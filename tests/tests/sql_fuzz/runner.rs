//! The fuzzing run's state and its per-routine loop (calls, judging, crash checks, restore).

use super::*;

/// The fuzzing run: its cluster, what it found so far, and how the server is doing.
pub(super) struct Fuzz<'a> {
    pub(super) c: &'a Cluster,
    /// A superuser session watching the server's epoch (and terminating hung calls).
    pub(super) monitor: Option<Client>,
    pub(super) epoch: Option<(String, i32)>,
    /// The batch kept claimed ([`LIVE`]).
    pub(super) live: String,
    pub(super) calls: usize,
    pub(super) failures: Vec<Failure>,
    /// Answers of the whole run by SQLSTATE.
    pub(super) codes: BTreeMap<String, usize>,
    pub(super) verbose: bool,
}

impl Fuzz<'_> {
    /// Calls `routine` with every combination, within [`ROUTINE_BUDGET`]; returns how many
    /// combinations the budget left uncalled.
    pub(super) fn routine(&mut self, routine: &Routine, combos: &[Vec<Val>]) -> usize {
        let started = Instant::now();
        let mut answers: BTreeMap<(String, String), usize> = BTreeMap::new();
        let mut left = 0;
        for (k, combo) in combos.iter().enumerate() {
            if started.elapsed() > ROUTINE_BUDGET {
                left = combos.len() - k;
                break;
            }
            self.calls += 1;
            let fill = |sql: &str| {
                sql.replace(SEQ, &self.calls.to_string())
                    .replace(LIVE, &self.live)
            };
            let args: Vec<String> = combo
                .iter()
                .zip(&routine.args)
                .map(|(value, arg)| fill(&typed(value, &arg.ty)))
                .collect();
            let sql = format!(
                "{} retention.{}({})",
                if routine.procedure { "CALL" } else { "SELECT" },
                routine.name,
                args.join(", ")
            );
            let label = combo
                .iter()
                .map(|val| fill(&val.label))
                .collect::<Vec<_>>()
                .join(", ");
            let answer = call(self.c, &sql, self.calls, &mut self.monitor);
            let (code, line) = match &answer {
                Answer::Ok => ("ok".to_owned(), String::new()),
                Answer::Error { code, message, .. } => (code.clone(), first_line(message)),
                Answer::Lost(e) => ("(lost)".to_owned(), first_line(e)),
                Answer::Hang => ("(hang)".to_owned(), String::new()),
            };
            *self.codes.entry(code.clone()).or_default() += 1;
            *answers.entry((code, line)).or_default() += 1;
            if let Some((sqlstate, message)) = judge(&answer) {
                self.fail(&routine.name, &label, sqlstate, message);
            }
            self.check_server(&routine.name, &label);
        }
        if self.verbose {
            println!("{}({}):", routine.name, routine.identity);
            for ((code, message), n) in &answers {
                println!("    {n:4} {code} {message}");
            }
        }
        self.live = restore(self.c, self.calls, &self.live);
        left
    }

    pub(super) fn fail(&mut self, function: &str, args: &str, sqlstate: String, message: String) {
        self.failures.push(Failure {
            function: function.to_owned(),
            args: args.to_owned(),
            sqlstate,
            message,
        });
    }

    /// Records a crash or restart of the server after the last call (a lost monitor session,
    /// another postmaster start time or another checkpointer) and waits for it to come back.
    fn check_server(&mut self, function: &str, args: &str) {
        let now = self.monitor.as_mut().and_then(server_epoch);
        if now.is_some() && now == self.epoch {
            return;
        }
        let message = format!(
            "the server crashed or restarted: {:?} -> {now:?}",
            self.epoch
        );
        self.fail(function, args, "(crash)".into(), message);
        self.monitor = reconnect(self.c);
        self.epoch = self.monitor.as_mut().and_then(server_epoch);
        assert!(
            self.monitor.is_some(),
            "the server did not come back after a crash"
        );
    }
}
