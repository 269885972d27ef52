//! Array parameters built by one `construct_array` call. pgrx turns a `Vec` into an array
//! element by element (an allocation and an append each, and for text a copy of each value):
//! for the 10,000 keys, places and xmins of an archive batch that was ~1.5 ms of every claim.

use crate::error::{Result, RetentionError};
use crate::tid::{pointer, Tid};
use pgrx::datum::DatumWithOid;
use pgrx::pg_sys;

/// The elements of a `text[]` argument named `name`, refusing (22004) a NULL element.
pub fn without_nulls(values: Vec<Option<String>>, name: &'static str) -> Result<Vec<String>> {
    values
        .into_iter()
        .map(|v| v.ok_or(RetentionError::NullArgument(name)))
        .collect()
}

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

/// `values` as a `text[]` parameter, NULLs kept. Every value is laid out as a text (a 4-byte
/// header, then its bytes) in one buffer of 4-byte words, so each starts aligned as text wants,
/// and the array is built from pointers into it.
pub fn texts(values: &[Option<String>]) -> Result<DatumWithOid<'static>> {
    let mut dims = [length(values.len())?];
    let mut lbs = [1];
    let words: usize = values
        .iter()
        .flatten()
        .map(|s| (4 + s.len()).div_ceil(4))
        .sum();
    let mut buf: Vec<u32> = vec![0; words];
    let base = buf.as_mut_ptr().cast::<u8>();
    let mut elems = Vec::with_capacity(values.len());
    let mut nulls = Vec::with_capacity(values.len());
    let mut at = 0usize;
    for value in values {
        let Some(s) = value else {
            elems.push(pg_sys::Datum::from(0usize));
            nulls.push(true);
            continue;
        };
        let len = 4 + s.len();
        let header = i32::try_from(len)
            .ok()
            .filter(|&l| l <= 0x3FFF_FFFF)
            .ok_or_else(|| RetentionError::Internal(format!("a text of {len} bytes")))?;
        // Safety: the buffer holds `words` 4-byte words, which leave room for this value's
        // header and bytes at word `at`; the header is 4-aligned.
        let start = unsafe {
            let p = base.add(at * 4);
            pgrx::set_varsize_4b(p.cast::<pg_sys::varlena>(), header);
            std::ptr::copy_nonoverlapping(s.as_ptr(), p.add(4), s.len());
            p
        };
        elems.push(pg_sys::Datum::from(start));
        nulls.push(false);
        at += len.div_ceil(4);
    }
    // Safety: every non-NULL element points at a complete text in `buf`, alive until
    // construct_md_array has copied them all.
    let array = unsafe {
        pg_sys::construct_md_array(
            elems.as_mut_ptr(),
            nulls.as_mut_ptr(),
            1,
            dims.as_mut_ptr(),
            lbs.as_mut_ptr(),
            pg_sys::TEXTOID,
            -1,
            false,
            pg_sys::TYPALIGN_INT as std::ffi::c_char,
        )
    };
    // Safety: the datum is a text[] array, as the oid says.
    Ok(unsafe { DatumWithOid::new(pg_sys::Datum::from(array), pg_sys::TEXTARRAYOID) })
}

#[cfg(any(test, feature = "pg_test"))]
#[pgrx::pg_schema]
// A panic is how a #[pg_test] fails (allow-unwrap-in-tests sees only #[test] functions).
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use pgrx::prelude::*;

    #[pg_test]
    fn arrays_built_at_once_equal_their_literals() {
        let same = Spi::get_one_with_args::<bool>(
            "SELECT $1 = '{\"(0,1)\",\"(7,65535)\",\"(4294967295,3)\"}'::tid[]
                AND $2 = '{-1,0,9223372036854775807}'::bigint[]
                AND cardinality($3) = 0 AND $3 = '{}'::tid[]
                AND $4 = ARRAY['42', NULL, '', 'héllo, \"world\"', repeat('x', 300)]
                AND $5 = '{}'::text[]",
            &[
                tids(&[(0, 1), (7, 65535), (4_294_967_295, 3)]).unwrap(),
                int8s(&[-1, 0, i64::MAX]).unwrap(),
                tids(&[]).unwrap(),
                texts(&[
                    Some("42".into()),
                    None,
                    Some(String::new()),
                    Some("héllo, \"world\"".into()),
                    Some("x".repeat(300)),
                ])
                .unwrap(),
                texts(&[]).unwrap(),
            ],
        );
        assert_eq!(same, Ok(Some(true)));
    }
}
