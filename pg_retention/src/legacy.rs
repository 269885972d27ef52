//! Symbols that earlier releases' upgrade scripts name. `ALTER EXTENSION … UPDATE` from an old
//! release runs every script in the chain against this library, and PostgreSQL looks up the C
//! symbol of each `CREATE FUNCTION … LANGUAGE c` it runs. The functions below are gone (the run
//! protocol keeps its state in the backend now: `api/sweep.rs`; wake() tells the launcher
//! through `worker/board.rs`; the fixpoint guard is a C trigger function: `guard.rs`); the
//! 0.5.0 script drops them
//! again before it ends. Called anyway, each raises.

use pgrx::pg_sys;

/// The version-1 calling convention record every symbol below declares.
static FINFO: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };

fn gone(name: &str) -> ! {
    pgrx::error!("retention.{name} was removed in pg_retention 0.5.0; run ALTER EXTENSION pg_retention UPDATE")
}

macro_rules! removed {
    ($($finfo:ident, $symbol:ident, $name:literal;)*) => {$(
        #[doc = concat!("Calling convention of the removed `retention.", $name, "`.")]
        #[unsafe(no_mangle)]
        pub extern "C" fn $finfo() -> &'static pg_sys::Pg_finfo_record {
            &FINFO
        }

        #[doc = concat!("The removed `retention.", $name, "`: raises.")]
        #[pgrx::pg_guard]
        #[unsafe(no_mangle)]
        pub extern "C-unwind" fn $symbol(_fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
            gone($name)
        }
    )*};
}

removed! {
    pg_finfo__sweep_start_wrapper, _sweep_start_wrapper, "_sweep_start";
    pg_finfo__sweep_step_wrapper, _sweep_step_wrapper, "_sweep_step";
    pg_finfo__sweep_failed_wrapper, _sweep_failed_wrapper, "_sweep_failed";
    pg_finfo__sweep_finish_wrapper, _sweep_finish_wrapper, "_sweep_finish";
    pg_finfo__set_latch_wrapper, _set_latch_wrapper, "_set_latch";
    pg_finfo__fixpoint_eligible_wrapper, _fixpoint_eligible_wrapper, "_fixpoint_eligible";
}
