//! The search_path a delete policy's statements run with. pg_retention pins
//! `pg_catalog, pg_temp`, so a governed table's own DELETE triggers — written by a library,
//! naming its tables without a schema — find nothing. A policy may name the schemas its
//! statements search instead (`search_path => ARRAY['jobs_lib']`): only the table's owner (or a
//! role with its privileges, or a superuser) may be able to create objects in each, so it holds
//! nothing that someone who could not already put code in the deletes' way (as the table's
//! triggers) put there, `pg_catalog` stays first (built-in functions and operators are never
//! shadowed) and `pg_temp` last (no session's temporary table is found by an unqualified name).

use crate::catalog::{PolicySpec, RelationInfo};
use crate::error::{Result, RetentionError};
use crate::sql_text::ident;
use pgrx::prelude::*;

/// The schemas of `spec.search_path`, empty meaning none given.
fn schemas(spec: &PolicySpec) -> &[String] {
    spec.search_path.as_deref().unwrap_or_default()
}

/// Refuses (22023, 3F000, 42501) a search_path that is not as the module says; an empty one
/// is none.
pub fn validate(spec: &PolicySpec, rel: &RelationInfo) -> Result<()> {
    let path = schemas(spec);
    if path.is_empty() {
        return Ok(());
    }
    if spec.action != crate::catalog::Action::Delete {
        return Err(RetentionError::invalid(
            "search_path applies to delete policies",
            "An archive policy's rows leave through the archive protocol, whose statements keep the pinned search_path.",
            "Drop search_path.",
        ));
    }
    for (i, schema) in path.iter().enumerate() {
        if schema == "pg_temp" || schema.starts_with("pg_temp_") {
            return Err(RetentionError::invalid(
                "search_path must not name pg_temp",
                "pg_temp is always searched last, so no session's temporary objects are found by an unqualified name.",
                "Drop pg_temp from search_path.",
            ));
        }
        if schema == "pg_catalog" && i > 0 {
            return Err(RetentionError::invalid(
                "pg_catalog must come first in search_path",
                "Built-in functions and operators are found before anything of the other schemas.",
                "Put pg_catalog first, or leave it out (it is then searched first).",
            ));
        }
        // Every role that can create objects in the schema (its owner, and CREATE's grantees:
        // PUBLIC never) must be trusted: a superuser, the table's owner or a role with its
        // privileges, or pg_database_owner when the table's owner owns the database.
        let trusted = Spi::get_one_with_args::<bool>(
            "SELECT (SELECT n.nspname = 'pg_catalog' OR (
                    SELECT bool_and(w.r <> 0 AND (
                               w.r = c.relowner
                               OR pg_catalog.pg_has_role(w.r, c.relowner, 'USAGE')
                               OR coalesce((SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.oid = w.r), false)
                               OR (w.r = 'pg_database_owner'::regrole
                                   AND pg_catalog.pg_has_role(c.relowner, w.r, 'USAGE'))))
                      FROM (SELECT n.nspowner AS r
                            UNION SELECT a.grantee
                              FROM pg_catalog.aclexplode(coalesce(n.nspacl, pg_catalog.acldefault('n', n.nspowner))) a
                             WHERE a.privilege_type = 'CREATE') w)
               FROM pg_catalog.pg_namespace n, pg_catalog.pg_class c
              WHERE n.nspname = $1 AND c.oid = $2::bigint::oid)",
            &[schema.as_str().into(), i64::from(rel.oid).into()],
        )?;
        match trusted {
            None => {
                return Err(RetentionError::raised(
                    "3F000",
                    format!("schema \"{schema}\" of search_path does not exist"),
                ))
            }
            Some(false) => {
                return Err(RetentionError::Privilege {
                    message: format!(
                        "schema \"{schema}\" of search_path lets a role other than the owner of {} (or a superuser) create objects in it",
                        rel.qualified
                    ),
                    hint: "Name schemas only the table's owner (or a superuser) can create objects in: whoever can create one could put it in the deletes' way.".into(),
                })
            }
            Some(true) => {}
        }
    }
    Ok(())
}

/// The DELETE triggers of table `relation` (and of its partitions and parents) whose functions
/// set no search_path of their own, with their functions: (trigger, function).
pub fn unpinned_triggers(relation: u32) -> Result<Vec<(String, String)>> {
    Ok(Spi::connect(|client| {
        client
            .select(
                "SELECT t.tgname::text, p.oid::regprocedure::text
                   FROM pg_catalog.pg_trigger t
                   JOIN pg_catalog.pg_proc p ON p.oid = t.tgfoid
                   JOIN pg_catalog.pg_language l ON l.oid = p.prolang
                  WHERE t.tgrelid IN (SELECT retention._tree_of($1::bigint::oid)) AND NOT t.tgisinternal
                    AND t.tgenabled <> 'D' AND (t.tgtype & 8) <> 0
                    AND l.lanname NOT IN ('c', 'internal')
                    AND NOT EXISTS (SELECT 1 FROM unnest(p.proconfig) c WHERE c LIKE 'search\\_path=%')
                  ORDER BY 1",
                None,
                &[i64::from(relation).into()],
            )?
            .map(|row| {
                Ok((
                    row.get::<String>(1)?.unwrap_or_default(),
                    row.get::<String>(2)?.unwrap_or_default(),
                ))
            })
            .collect::<std::result::Result<Vec<_>, pgrx::spi::SpiError>>()
    })?)
}

/// A NOTICE per DELETE trigger of `rel` whose function sets no search_path of its own, when
/// the policy names none either: under the pinned one, an unqualified name in it finds nothing.
pub fn notice_unpinned_triggers(spec: &PolicySpec, rel: &RelationInfo) -> Result<()> {
    if !schemas(spec).is_empty() || spec.action != crate::catalog::Action::Delete {
        return Ok(());
    }
    for (trigger, function) in unpinned_triggers(rel.oid)? {
        notice!(
            "the DELETE trigger {trigger} of {} calls {function}, which sets no search_path of its own: pg_retention's deletes run with search_path = pg_catalog, pg_temp, where an unqualified name in it finds nothing. Give the policy search_path => ARRAY['<the schema it names objects in>'].",
            rel.qualified
        );
    }
    Ok(())
}

/// For a step that failed with `sqlstate`: when the failure is a name not found (class 42) and
/// the table has DELETE triggers whose functions set no search_path, what to add to the error
/// so it names them.
pub fn failure_note(relation: u32, sqlstate: &str, path: Option<&[String]>) -> Option<String> {
    if !sqlstate.starts_with("42") || path.is_some_and(|p| !p.is_empty()) {
        return None;
    }
    let triggers = unpinned_triggers(relation).ok()?;
    if triggers.is_empty() {
        return None;
    }
    let named: Vec<String> = triggers
        .iter()
        .map(|(t, f)| format!("trigger {t} (function {f})"))
        .collect();
    Some(format!(
        " [in a DELETE trigger? the table's {} set no search_path of their own, and the deletes run with search_path = pg_catalog, pg_temp: give the policy search_path => ARRAY['<schema>']]",
        named.join(", ")
    ))
}

/// The search_path setting a policy's `path` names (its schemas, then `pg_temp`); None when it
/// names none (the pinned one holds).
pub fn setting(path: Option<&[String]>) -> Option<String> {
    let path = path.filter(|p| !p.is_empty())?;
    Some(
        path.iter()
            .map(|s| ident(s))
            .chain(std::iter::once("pg_temp".to_owned()))
            .collect::<Vec<_>>()
            .join(", "),
    )
}
