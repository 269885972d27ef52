//! Shared scaffolding for the end-to-end tests: throwaway PostgreSQL clusters with pg_retention
//! preloaded, and throwaway SeaweedFS (S3-compatible) servers. Both clean up on drop.
#![deny(missing_docs, rust_2018_idioms)]

pub mod cluster;
pub mod ports;
pub mod seaweed;

pub use cluster::Cluster;
pub use seaweed::Seaweed;
