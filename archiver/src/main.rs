//! `pg-retention-archiver`: writes verified archive slices to object storage and then asks the
//! extension to prune exactly the rows it archived. This build carries the command-line shell;
//! the archive commands arrive with the archiver issue.
#![deny(missing_docs, unreachable_pub, rust_2018_idioms)]

mod cli;

use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = cli::Cli::parse();
    cli.dispatch()
}
