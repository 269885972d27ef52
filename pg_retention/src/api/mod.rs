//! The SQL surface of the extension. Each submodule is one group of functions.

pub mod version;
