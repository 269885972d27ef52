//! The archiver's trust boundary, end to end (class 11): a real cluster and the real archiver
//! binary against what an adversary controls — the names of the tables it archives, the bytes of
//! the object store (a manifest names the types `restore` loads rows through), and the text of
//! connection strings and configuration files that must never be echoed.
//!
//! The archiver runs as production runs it: `archiver`, a LOGIN member of `retention_archiver`
//! only ([`Cluster::archiver_url`]); `restore` runs as `restorer` (the same, with CREATE on
//! schema `public`) or, where the test is about what a superuser operator risks, as the
//! superuser.

use bytes::Bytes;
use object_store::{path::Path, ObjectStore, PutPayload};
use pg_retention_integration::archiver::{binary, text, Archiver};
use pg_retention_integration::{column, scalar, Cluster, Seaweed};
use postgres::Client;
use std::collections::BTreeSet;
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::time::Duration;

/// A tampered manifest naming a type whose input runs code: refused, or restored as text.
mod manifest_types;
/// Secrets in connection strings, configuration and store settings never reach any output.
mod secrets;
/// A table named with quotes, tabs and newlines, through every command, on file:// and S3.
mod weird_names;

fn manifest_for(slice_key: &str) -> String {
    format!(
        "{}.manifest.json",
        slice_key.strip_suffix(".slice").expect("a slice key")
    )
}

fn scratch(name: &str) -> std::path::PathBuf {
    let d = pg_retention_integration::temp_dir(name);
    std::fs::create_dir_all(&d).unwrap();
    d
}
