//! Array parameters built by one `construct_array` call. pgrx turns a `Vec` into an array
//! element by element (an allocation and an append each): for the 10,000 places and xmins of
//! an archive batch that was ~0.8 ms of every claim and every prune.

use crate::error::{Result, RetentionError};
use crate::tid::{pointer, Tid};
use pgrx::datum::DatumWithOid;
use pgrx::pg_sys;

fn length(n: usize) -> Result<i32> {
    i32::try_from(n)
        .map_err(|_| RetentionError::Internal(format!("an array of {n} elements is too long")))
}

/// `places` as a `tid[]` parameter.
pub fn tids(places: &[Tid]) -> Result<DatumWithOid<'static>> {
    let n = length(places.len())?;
    let mut tids: Vec<pg_sys::ItemPointerData> = places.iter().map(|&p| pointer(p)).collect();
    let mut elems: Vec<pg_sys::Datum> = tids
        .iter_mut()
        .map(|t| pg_sys::Datum::from(t as *mut pg_sys::ItemPointerData))
        .collect();
    // Safety: every element points at a 6-byte tid in `tids`, alive until construct_array has
    // copied them all into the array it allocates in the current memory context.
    let array = unsafe {
        pg_sys::construct_array(
            elems.as_mut_ptr(),
            n,
            pg_sys::TIDOID,
            6,
            false,
            pg_sys::TYPALIGN_SHORT as std::ffi::c_char,
        )
    };
    // Safety: the datum is a tid[] array, as the oid says.
    Ok(unsafe { DatumWithOid::new(pg_sys::Datum::from(array), pg_sys::TIDARRAYOID) })
}

/// `values` as a `bigint[]` parameter.
pub fn int8s(values: &[i64]) -> Result<DatumWithOid<'static>> {
    let n = length(values.len())?;
    let mut elems: Vec<pg_sys::Datum> = values.iter().map(|&v| pg_sys::Datum::from(v)).collect();
    // Safety: bigint is passed by value (8 bytes, double-aligned) on every platform PostgreSQL
    // 15 and 18 support; construct_array copies the values.
    let array = unsafe {
        pg_sys::construct_array(
            elems.as_mut_ptr(),
            n,
            pg_sys::INT8OID,
            8,
            true,
            pg_sys::TYPALIGN_DOUBLE as std::ffi::c_char,
        )
    };
    // Safety: the datum is a bigint[] array, as the oid says.
    Ok(unsafe { DatumWithOid::new(pg_sys::Datum::from(array), pg_sys::INT8ARRAYOID) })
}

#[cfg(any(test, feature = "pg_test"))]
#[pgrx::pg_schema]
mod tests {
    use super::*;
    use pgrx::prelude::*;

    #[pg_test]
    fn arrays_built_at_once_equal_their_literals() {
        let same = Spi::get_one_with_args::<bool>(
            "SELECT $1 = '{\"(0,1)\",\"(7,65535)\",\"(4294967295,3)\"}'::tid[]
                AND $2 = '{-1,0,9223372036854775807}'::bigint[]
                AND cardinality($3) = 0 AND $3 = '{}'::tid[]",
            &[
                tids(&[(0, 1), (7, 65535), (4_294_967_295, 3)]).unwrap(),
                int8s(&[-1, 0, i64::MAX]).unwrap(),
                tids(&[]).unwrap(),
            ],
        );
        assert_eq!(same, Ok(Some(true)));
    }
}
