//! Command-line surface of the archiver.

use clap::Parser;
use std::process::ExitCode;

/// Archiver sidecar for pg_retention.
///
/// Claims batches of archive-eligible rows from the extension, writes them to object storage as
/// verified slices (create-only, read back and digest-checked), and only then asks the extension
/// to delete exactly the rows it archived.
#[derive(Debug, Parser)]
#[command(name = "pg-retention-archiver", version, about, long_about)]
pub(crate) struct Cli {
    /// Slice format version this binary writes.
    #[arg(long)]
    format_version: bool,
}

impl Cli {
    /// Runs what the arguments ask for.
    pub(crate) fn dispatch(self) -> ExitCode {
        if self.format_version {
            println!("{}", pg_retention_format::FORMAT_VERSION);
        } else {
            eprintln!(
                "no command given; see --help (archive commands are not part of this build yet)"
            );
            return ExitCode::from(2);
        }
        ExitCode::SUCCESS
    }
}
