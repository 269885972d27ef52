//! `pg-retention-archiver`: writes verified archive slices to object storage and then asks the
//! extension to prune exactly the rows it archived. `main` only parses, sets up logging and
//! dispatches; each command lives in its module, every statement sent to the database in
//! `db`, every exit code in `exit`.
#![deny(rust_2018_idioms)]
// `unsafe` only where `memory` sets a malloc parameter (allowed there, with its reason).
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod cli;
mod config;
mod db;
mod error;
mod exit;
mod expire;
mod fault;
mod http;
mod keys;
mod lifecycle;
mod memory;
mod metrics;
mod namespace;
mod ops;
mod orphans;
mod pipeline;
mod redact;
mod restore;
mod runner;
mod sse;
mod store;
mod supersede;
mod tls;
mod trust;
mod verify;

use clap::Parser;
use cli::{Cli, Command};
use config::Settings;
use error::{Error, Result};
use exit::Exit;
use std::process::ExitCode;
use tokio_util::sync::CancellationToken;

fn init_logging(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colours only on a terminal: logs collected from a pipe stay plain text.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}

/// Cancels `token` on SIGTERM or SIGINT.
fn cancel_on_signals(token: CancellationToken) {
    tokio::spawn(async move {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(e) => {
                    tracing::error!(error = %e, "cannot listen for SIGTERM");
                    return;
                }
            };
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM: finishing the batch in progress"),
            _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: finishing the batch in progress"),
        }
        token.cancel();
    });
}

async fn dispatch(cli: Cli, settings: Settings) -> Result<()> {
    match cli.command {
        Command::Run => {
            let token = CancellationToken::new();
            cancel_on_signals(token.clone());
            runner::run(settings, token).await
        }
        Command::Once { max_batches } => runner::once(settings, max_batches).await.map(|_| ()),
        Command::ServeMetrics => {
            let token = CancellationToken::new();
            cancel_on_signals(token.clone());
            http::serve_metrics(settings, token).await
        }
        Command::Ls => ops::ls(&settings).await,
        Command::SweepOrphans { older_than, apply } => {
            let age = humantime::parse_duration(&older_than)
                .map_err(|e| Error::Config(format!("--older-than {older_than:?}: {e}")))?;
            orphans::sweep(&settings, age, apply).await
        }
        Command::Inspect { target } => ops::inspect(&settings, &target).await,
        Command::Verify { all, key } => verify::verify(&settings, all, key.as_deref())
            .await?
            .into_result(),
        Command::Expire { .. } => Err(Error::Config(
            "expire is dispatched with its own exit codes".into(),
        )),
        Command::Restore {
            key,
            into,
            untyped_as_text,
        } => {
            let n = restore::restore(&settings, &key, &into, untyped_as_text).await?;
            println!("restored {n} rows into {into}");
            Ok(())
        }
    }
}

/// Runs one step of an expire operation: how it ended ([`Exit`]: done, invalid input, refused
/// or not ready, partial, a bounded service failure, the namespace another database's).
async fn expire_step(
    settings: &Settings,
    bounds: cli::ExpireBounds,
    actor: &str,
    step: cli::ExpireStep,
) -> Exit {
    // `status` only reads: it has no figures.
    let counted = !matches!(step, cli::ExpireStep::Status { .. });
    let mut tally = lifecycle::Tally::default();
    let result = async {
        let active = humantime::parse_duration(&bounds.max_active_time).map_err(|e| {
            Error::Config(format!(
                "--max-active-time {:?}: {e}",
                bounds.max_active_time
            ))
        })?;
        if !(1..=expire::MAX_KEYS_PER_REQUEST).contains(&bounds.keys_per_request) {
            return Err(Error::Config(format!(
                "--keys-per-request must be 1 to {}",
                expire::MAX_KEYS_PER_REQUEST
            )));
        }
        let bounds = expire::Bounds {
            max_objects: bounds.max_objects,
            max_bytes: bounds.max_bytes,
            keys_per_request: bounds.keys_per_request,
            max_active_seconds: active.as_secs(),
        };
        match step {
            cli::ExpireStep::Plan { output } => {
                expire::plan(settings, bounds, &output, &mut tally).await
            }
            cli::ExpireStep::Prepare {
                plan,
                plan_sha256,
                quiescence,
            } => {
                let quiescence = humantime::parse_duration(&quiescence)
                    .map_err(|e| Error::Config(format!("--quiescence {quiescence:?}: {e}")))?;
                expire::prepare(settings, &plan, &plan_sha256, quiescence, actor).await
            }
            cli::ExpireStep::Apply {
                operation_id,
                plan_sha256,
            } => expire::apply(settings, &operation_id, &plan_sha256, actor, &mut tally).await,
            cli::ExpireStep::Status { operation_id } => {
                expire::status(settings, &operation_id).await
            }
        }
    }
    .await;
    if let Err(e) = &result {
        tally.ended(e);
    }
    if counted {
        lifecycle::record(settings, lifecycle::Command::Expire, &tally);
    }
    match result {
        Ok(exit) => exit,
        Err(e) => expire::failed(&e),
    }
}

fn main() -> ExitCode {
    memory::tune();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // --help and --version.
        Err(e) if !e.use_stderr() => {
            let _ = e.print();
            return Exit::Done.into();
        }
        Err(e) => {
            eprint!("{}", cli::usage_error(&e));
            return Exit::Invalid.into();
        }
    };
    let settings = match Settings::resolve(cli.options.clone()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("pg-retention-archiver: {e}");
            return Exit::of(&e).into();
        }
    };
    init_logging(settings.json_logs);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("pg-retention-archiver: cannot start the runtime: {e}");
            return Exit::Other.into();
        }
    };
    if let Command::Expire {
        bounds,
        actor,
        step,
    } = cli.command
    {
        let actor = actor.unwrap_or_else(|| settings.owner.clone());
        let code = runtime.block_on(expire_step(&settings, bounds, &actor, step));
        return code.into();
    }
    match runtime.block_on(dispatch(cli, settings)) {
        Ok(()) => Exit::Done.into(),
        Err(e) => {
            tracing::error!(error = %e, "pg-retention-archiver failed");
            eprintln!("pg-retention-archiver: {e}");
            Exit::of(&e).into()
        }
    }
}
