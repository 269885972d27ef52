//! A table's partition tree read from the system catalogs without locking any of it:
//! `retention._below` and `retention._tree_of`, which every step's fingerprint, hold fence and
//! hold read, and every description of a partitioned table, call. As SQL functions (a recursive
//! query over pg_inherits, pinned search_path) each call was planned afresh: about 0.3 ms of a
//! sweep step's fingerprint. `pg_partition_tree` is not an option: it locks every partition it
//! lists until the transaction ends, and a drop of one of them would wait for that.

use pgrx::prelude::*;

// Not in pgrx's bindings; declared as PostgreSQL 15 and 18 define them, and called through
// pg_guard_ffi_boundary so that an ERROR raised inside becomes a Rust panic that pgrx turns
// back into the ERROR at our function's boundary.
unsafe extern "C-unwind" {
    /// catalog/pg_inherits.h: the direct inheritance children of a table (all of them with
    /// `omit_detached` false, a partition being detached concurrently too), locking none with
    /// NoLock.
    fn find_inheritance_children_extended(
        parent: pg_sys::Oid,
        omit_detached: bool,
        lockmode: pg_sys::LOCKMODE,
        detached_exist: *mut bool,
        detached_xmin: *mut pg_sys::TransactionId,
    ) -> *mut pg_sys::List;
    /// catalog/partition.h: the partitioned tables a partition is under, nearest first
    /// (empty for a table that is no partition); takes no lock.
    fn get_partition_ancestors(relid: pg_sys::Oid) -> *mut pg_sys::List;
}

/// The oids of an oid list (NIL is empty).
fn oids(list: *mut pg_sys::List) -> Vec<pg_sys::Oid> {
    if list.is_null() {
        return Vec::new();
    }
    // Safety: a non-NIL List made by the backend has `length` initialized cells in `elements`,
    // and an oid list's cells hold oids.
    unsafe {
        let len = usize::try_from((*list).length).unwrap_or(0);
        (0..len)
            .map(|i| (*(*list).elements.add(i)).oid_value)
            .collect()
    }
}

/// Table `relation` and, when it is a partitioned table, every partition under it at any
/// depth. Children of a table that is not partitioned (plain inheritance) are not its rows'
/// partitions and are left out; a partitioned table's children are all partitions.
pub fn below(relation: pg_sys::Oid) -> Vec<pg_sys::Oid> {
    let mut tree = vec![relation];
    let mut next = 0;
    while next < tree.len() {
        let rel = tree[next];
        next += 1;
        // Safety: syscache and pg_inherits reads of an oid in a transaction; a missing relation
        // has relkind 0 and no children.
        let partitioned =
            unsafe { pg_sys::get_rel_relkind(rel) } as u8 == pg_sys::RELKIND_PARTITIONED_TABLE;
        if partitioned {
            let children = unsafe {
                pg_sys::ffi::pg_guard_ffi_boundary(|| {
                    find_inheritance_children_extended(
                        rel,
                        false,
                        pg_sys::NoLock as pg_sys::LOCKMODE,
                        std::ptr::null_mut(),
                        std::ptr::null_mut(),
                    )
                })
            };
            tree.extend(oids(children));
        }
    }
    tree
}

/// The tables that share rows with table `relation`: itself, the partitioned tables it is a
/// partition of, and every partition under it.
pub fn tree_of(relation: pg_sys::Oid) -> Vec<pg_sys::Oid> {
    // Safety: syscache and pg_inherits reads of an oid in a transaction. Only a partition has
    // ancestors: get_partition_ancestors would name a plain inheritance child's parent too.
    let mut tree = if unsafe { pg_sys::get_rel_relispartition(relation) } {
        oids(unsafe { pg_sys::ffi::pg_guard_ffi_boundary(|| get_partition_ancestors(relation)) })
    } else {
        Vec::new()
    };
    tree.extend(below(relation));
    tree
}

/// `retention._below(relation)`: see [`below`].
#[pg_extern(stable, parallel_safe)]
fn _below(relation: pg_sys::Oid) -> SetOfIterator<'static, pg_sys::Oid> {
    SetOfIterator::new(below(relation))
}

/// `retention._tree_of(relation)`: see [`tree_of`]. Holds on any of these tables reach the
/// table's rows (a hold on a partition protects that partition's rows), foreign keys to any of
/// them guard them, and policies on any of them govern them.
#[pg_extern(stable, parallel_safe)]
fn _tree_of(relation: pg_sys::Oid) -> SetOfIterator<'static, pg_sys::Oid> {
    SetOfIterator::new(tree_of(relation))
}

#[cfg(any(test, feature = "pg_test"))]
#[pgrx::pg_schema]
// A panic is how a #[pg_test] fails (allow-unwrap-in-tests sees only #[test] functions).
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use pgrx::prelude::*;

    /// The relation names `retention.<function>(<relation>)` returns, sorted.
    fn names(function: &str, relation: &str) -> String {
        Spi::get_one::<String>(&format!(
            "SELECT string_agg(x::regclass::text, ',' ORDER BY x::regclass::text)
               FROM retention.{function}('{relation}'::regclass) x"
        ))
        .ok()
        .flatten()
        .unwrap_or_default()
    }

    #[pg_test]
    fn the_tree_reaches_every_partition_at_any_depth_and_no_inheritance_child() {
        Spi::run(
            "CREATE TABLE ev (at date NOT NULL, k int NOT NULL) PARTITION BY RANGE (at);
             CREATE TABLE ev_a PARTITION OF ev FOR VALUES FROM ('2026-01-01') TO ('2026-02-01');
             CREATE TABLE ev_b PARTITION OF ev FOR VALUES FROM ('2026-02-01') TO ('2026-03-01')
               PARTITION BY LIST (k);
             CREATE TABLE ev_b1 PARTITION OF ev_b FOR VALUES IN (1);
             CREATE TABLE ev_b2 PARTITION OF ev_b DEFAULT;
             CREATE TABLE plain (k int);
             CREATE TABLE plain_child () INHERITS (plain);",
        )
        .expect("the tables");
        assert_eq!(names("_below", "ev"), "ev,ev_a,ev_b,ev_b1,ev_b2");
        assert_eq!(names("_below", "ev_b"), "ev_b,ev_b1,ev_b2");
        assert_eq!(names("_below", "ev_a"), "ev_a");
        assert_eq!(names("_tree_of", "ev_b1"), "ev,ev_b,ev_b1");
        assert_eq!(names("_tree_of", "ev_b"), "ev,ev_b,ev_b1,ev_b2");
        assert_eq!(names("_below", "plain"), "plain");
        assert_eq!(names("_tree_of", "plain_child"), "plain_child");
        // A leaf detached is a table of its own; a dropped one is gone from the tree.
        Spi::run("ALTER TABLE ev_b DETACH PARTITION ev_b1; DROP TABLE ev_a")
            .expect("detach and drop");
        assert_eq!(names("_below", "ev"), "ev,ev_b,ev_b2");
        assert_eq!(names("_tree_of", "ev_b1"), "ev_b1");
    }
}
