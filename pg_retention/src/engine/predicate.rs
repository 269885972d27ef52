//! Predicate validation: a user predicate must be one boolean expression over the table's own
//! columns. It is parsed and analysed against the table (through `SPI_prepare`), then the
//! analysed query is inspected: no subqueries, aggregates, window functions, set-returning
//! functions or volatile functions. Multiple statements fail to prepare. Callers run this as
//! the predicate's author (`author::run_as`).

use crate::sql_text::ident;
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::PgList;
use std::ffi::CString;

/// Prepares `SELECT (<predicate>) FROM ONLY <table> t` and returns why the predicate
/// is not acceptable, or None when it is. With `built_in_only`, a predicate that calls any
/// function (or operator, or type I/O) not built into PostgreSQL is refused too. Parse and
/// analysis errors propagate as Postgres errors; `retention._predicate_check` turns them into
/// RT101.
pub fn problem(qualified_table: &str, predicate: &str, built_in_only: bool) -> Option<String> {
    if predicate.trim().is_empty() {
        return Some("the predicate is empty".into());
    }
    let sql = format!(
        "SELECT (\n{predicate}\n) AS {} FROM ONLY {qualified_table} t",
        ident("p")
    );
    let sql_for_run = sql.clone();
    let Ok(csql) = CString::new(sql) else {
        return Some("the predicate contains a NUL byte".into());
    };
    let verdict = Spi::connect(|_client| {
        // Safety: SPI is connected for the duration of this closure; the plan is freed before
        // returning, and the lists we read belong to it.
        unsafe {
            let plan = pg_sys::SPI_prepare(csql.as_ptr(), 0, std::ptr::null_mut());
            if plan.is_null() {
                return Some("the predicate could not be prepared".into());
            }
            let sources = PgList::<pg_sys::CachedPlanSource>::from_pg(
                pg_sys::SPI_plan_get_plan_sources(plan),
            );
            let verdict = if sources.len() != 1 {
                Some("the predicate must be a single expression".to_string())
            } else {
                sources
                    .get_ptr(0)
                    .and_then(|src| inspect_queries((*src).query_list, built_in_only))
            };
            pg_sys::SPI_freeplan(plan);
            verdict
        }
    });
    if verdict.is_some() {
        return verdict;
    }
    // Started but reading no row: the executor checks the author's privileges on the columns
    // and functions the predicate uses, so a predicate its author may not run is refused now.
    match Spi::run(&format!("{sql_for_run} LIMIT 0")) {
        Ok(()) => None,
        Err(e) => Some(e.to_string()),
    }
}

/// Safety: `list` must be a valid List of Query nodes.
unsafe fn inspect_queries(list: *mut pg_sys::List, built_in_only: bool) -> Option<String> {
    let queries = PgList::<pg_sys::Query>::from_pg(list);
    if queries.len() != 1 {
        return Some("the predicate must be a single expression".into());
    }
    let q = queries.get_ptr(0)?;
    let q = &*q;
    if q.commandType != pg_sys::CmdType::CMD_SELECT || !q.utilityStmt.is_null() {
        return Some("the predicate must be an expression, not a statement".into());
    }
    if q.hasSubLinks {
        return Some("subqueries are not allowed".into());
    }
    if q.hasAggs {
        return Some("aggregate functions are not allowed".into());
    }
    if q.hasWindowFuncs {
        return Some("window functions are not allowed".into());
    }
    if q.hasTargetSRFs {
        return Some("set-returning functions are not allowed".into());
    }
    if q.hasModifyingCTE || !q.cteList.is_null() {
        return Some("WITH clauses are not allowed".into());
    }
    let targets = PgList::<pg_sys::TargetEntry>::from_pg(q.targetList);
    let Some(te) = targets.get_ptr(0) else {
        return Some("the predicate must be one expression".into());
    };
    if targets.len() != 1 || pg_sys::exprType((*te).expr.cast()) != pg_sys::BOOLOID {
        return Some("the predicate must be a boolean expression".into());
    }
    if pg_sys::contain_volatile_functions(q.targetList.cast()) {
        return Some(
            "volatile functions (random(), clock_timestamp(), nextval(), ...) are not allowed"
                .into(),
        );
    }
    if built_in_only && calls_user_code(q.targetList.cast()) {
        return Some(
            "only functions built into PostgreSQL may be called here: this predicate becomes part of a CHECK constraint that every writer of the table evaluates with their own privileges"
                .into(),
        );
    }
    None
}

/// True for a function that is not built into PostgreSQL.
unsafe extern "C-unwind" fn user_function(func_id: pg_sys::Oid, _: *mut std::ffi::c_void) -> bool {
    func_id.to_u32() >= pg_sys::FirstNormalObjectId
}

/// Walks an expression tree: true when any node calls a user function (directly, through an
/// operator, a cast or a type's I/O).
unsafe extern "C-unwind" fn user_code_walker(
    node: *mut pg_sys::Node,
    context: *mut std::ffi::c_void,
) -> bool {
    if node.is_null() {
        return false;
    }
    if pg_sys::check_functions_in_node(node, Some(user_function), context) {
        return true;
    }
    pg_sys::expression_tree_walker(node, Some(user_code_walker), context)
}

/// Safety: `node` must be a valid expression tree (here, an analysed target list).
unsafe fn calls_user_code(node: *mut pg_sys::Node) -> bool {
    user_code_walker(node, std::ptr::null_mut())
}
