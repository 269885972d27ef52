//! Archive-then-prune: claimed batches with frozen key sets, deterministic slice frames, and
//! the digest-checked prune. No row of an archive policy is deleted unless the bytes of its
//! current contents hash to the digest of the slice the archiver wrote and read back.

pub mod batch;
pub mod render;
