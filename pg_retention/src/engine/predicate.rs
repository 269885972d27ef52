//! Predicate validation: a user predicate must be one boolean expression over the table's own
//! columns. It is parsed and analysed against the table (through `SPI_prepare`), then the
//! analysed query is inspected: no subqueries, aggregates, window functions, set-returning
//! functions or volatile functions. Callers run this as the predicate's author
//! (`author::run_as`).
//!
//! Before any of that, the text must be one expression *by itself*: `SELECT (\n<predicate>\n)`
//! with nothing around it must raw-parse to exactly one plain SELECT of one target. Every place a
//! predicate is embedded wraps it the same way (`(\n<predicate>\n)`, see `sql_text::predicate`),
//! so a predicate that passes cannot open a quote, a dollar quote or a comment that closes in
//! the surrounding text, and holds no `;`: the text that runs is the text that was validated.

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
    problem_of(qualified_table, predicate, built_in_only, Yields::Boolean)
}

/// What an expression must yield.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Yields {
    /// A predicate: boolean.
    Boolean,
    /// A clock (`age_expression`): timestamptz, timestamp or date.
    Time,
}

/// [`problem`] for an expression that yields `yields`.
pub fn problem_of(
    qualified_table: &str,
    predicate: &str,
    built_in_only: bool,
    yields: Yields,
) -> Option<String> {
    if predicate.trim().is_empty() {
        return Some("the predicate is empty".into());
    }
    if let Some(problem) = not_self_contained(predicate) {
        return Some(problem);
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
                    .and_then(|src| inspect_queries((*src).query_list, built_in_only, yields))
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

/// Why `predicate` is not one expression on its own, or None. The raw parser sees only
/// `SELECT (\n<predicate>\n)`: nothing that follows the predicate in a real statement (a table
/// name, a quoted identifier) can close what it opened. Parse errors raise (see [`problem`]).
fn not_self_contained(predicate: &str) -> Option<String> {
    let Ok(text) = CString::new(format!("SELECT (\n{predicate}\n)")) else {
        return Some("the predicate contains a NUL byte".into());
    };
    // Safety: raw_parser reads the NUL-terminated text and returns a List of RawStmt allocated
    // in the current memory context; we only read it.
    unsafe {
        let stmts = PgList::<pg_sys::RawStmt>::from_pg(pg_sys::raw_parser(
            text.as_ptr(),
            pg_sys::RawParseMode::RAW_PARSE_DEFAULT,
        ));
        if stmts.len() != 1 {
            return Some(
                "the predicate must be a single expression, not several statements".into(),
            );
        }
        let raw = stmts.get_ptr(0)?;
        let node = (*raw).stmt;
        if node.is_null() || (*node).type_ != pg_sys::NodeTag::T_SelectStmt {
            return Some("the predicate must be a single expression".into());
        }
        let select = &*node.cast::<pg_sys::SelectStmt>();
        let one_target = PgList::<pg_sys::Node>::from_pg(select.targetList).len() == 1;
        let bare = select.op == pg_sys::SetOperation::SETOP_NONE
            && select.fromClause.is_null()
            && select.whereClause.is_null()
            && select.groupClause.is_null()
            && select.havingClause.is_null()
            && select.windowClause.is_null()
            && select.sortClause.is_null()
            && select.distinctClause.is_null()
            && select.valuesLists.is_null()
            && select.limitCount.is_null()
            && select.limitOffset.is_null()
            && select.lockingClause.is_null()
            && select.withClause.is_null()
            && select.intoClause.is_null();
        if !(one_target && bare) {
            return Some("the predicate must be a single expression".into());
        }
    }
    None
}

/// Safety: `list` must be a valid List of Query nodes.
unsafe fn inspect_queries(
    list: *mut pg_sys::List,
    built_in_only: bool,
    yields: Yields,
) -> Option<String> {
    // SAFETY (this block and those below): `list` and the nodes reached from it are the
    // analysed queries this function's contract promises.
    let queries = unsafe { PgList::<pg_sys::Query>::from_pg(list) };
    if queries.len() != 1 {
        return Some("the predicate must be a single expression".into());
    }
    let q = queries.get_ptr(0)?;
    let q = unsafe { &*q };
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
    let targets = unsafe { PgList::<pg_sys::TargetEntry>::from_pg(q.targetList) };
    let Some(te) = targets.get_ptr(0) else {
        return Some("the predicate must be one expression".into());
    };
    let found = unsafe { pg_sys::exprType((*te).expr.cast()) };
    if targets.len() != 1 {
        return Some("the predicate must be one expression".into());
    }
    match yields {
        Yields::Boolean if found != pg_sys::BOOLOID => {
            return Some("the predicate must be a boolean expression".into());
        }
        Yields::Time
            if ![
                pg_sys::TIMESTAMPTZOID,
                pg_sys::TIMESTAMPOID,
                pg_sys::DATEOID,
            ]
            .contains(&found) =>
        {
            return Some("the expression must yield a timestamptz, timestamp or date".into());
        }
        _ => {}
    }
    if unsafe { pg_sys::contain_volatile_functions(q.targetList.cast()) } {
        return Some(
            "volatile functions (random(), clock_timestamp(), nextval(), ...) are not allowed"
                .into(),
        );
    }
    if built_in_only && unsafe { calls_user_code(q.targetList.cast()) } {
        return Some(
            "only functions built into PostgreSQL may be called here: this predicate becomes part of a CHECK constraint that every writer of the table evaluates with their own privileges"
                .into(),
        );
    }
    None
}

/// True for a type whose values a predicate may build (cast to, or write as a literal of) without
/// running anyone's code: built-in types, enums (their input is the built-in `enum_in`), and
/// arrays of those. A domain runs its CHECK wherever a value is cast to it; a composite or range
/// type may carry a domain inside; a user base type has user I/O functions.
fn safe_type(type_id: pg_sys::Oid) -> bool {
    if type_id.to_u32() < pg_sys::FirstNormalObjectId {
        return true;
    }
    // Safety: syscache lookups by oid; both return InvalidOid / '\0' for an unknown type.
    unsafe {
        if pg_sys::get_typtype(type_id) == pg_sys::TYPTYPE_ENUM as std::ffi::c_char {
            return true;
        }
        let element = pg_sys::get_element_type(type_id);
        element != pg_sys::InvalidOid && safe_type(element)
    }
}

/// Node kinds that make a value of their result type (all of them known to `exprType`); a `Var`
/// only reads one.
fn produces_value(tag: pg_sys::NodeTag) -> bool {
    use pg_sys::NodeTag as T;
    matches!(
        tag,
        T::T_Const
            | T::T_FuncExpr
            | T::T_OpExpr
            | T::T_CoerceViaIO
            | T::T_CoerceToDomain
            | T::T_RelabelType
            | T::T_ArrayCoerceExpr
            | T::T_ConvertRowtypeExpr
            | T::T_RowExpr
            | T::T_ArrayExpr
            | T::T_CaseExpr
            | T::T_CoalesceExpr
            | T::T_MinMaxExpr
            | T::T_FieldSelect
    )
}

/// True for a function that is not built into PostgreSQL.
unsafe extern "C-unwind" fn user_function(func_id: pg_sys::Oid, _: *mut std::ffi::c_void) -> bool {
    func_id.to_u32() >= pg_sys::FirstNormalObjectId
}

/// Walks an expression tree: true when any node calls a user function (directly, through an
/// operator, a cast or a type's I/O), produces a value of a type that is not safe (see
/// [`safe_type`]), or coerces to any domain.
unsafe extern "C-unwind" fn user_code_walker(
    node: *mut pg_sys::Node,
    context: *mut std::ffi::c_void,
) -> bool {
    if node.is_null() {
        return false;
    }
    // SAFETY: PostgreSQL's tree walker calls this with a node of the tree it walks (and
    // `calls_user_code` with the root of one), which it has just checked is not NULL.
    unsafe {
        if pg_sys::check_functions_in_node(node, Some(user_function), context) {
            return true;
        }
        // Reading a column of a user type runs nothing; producing a value of one may (a
        // domain's CHECK, a composite's domain-typed field, a user type's input function).
        if produces_value((*node).type_) && !safe_type(pg_sys::exprType(node)) {
            return true;
        }
        pg_sys::expression_tree_walker(node, Some(user_code_walker), context)
    }
}

/// Safety: `node` must be a valid expression tree (here, an analysed target list).
unsafe fn calls_user_code(node: *mut pg_sys::Node) -> bool {
    // SAFETY: the walker needs a valid tree or NULL, which is this function's contract.
    unsafe { user_code_walker(node, std::ptr::null_mut()) }
}
