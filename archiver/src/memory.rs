//! How the process allocates: one malloc arena for every thread, and large blocks kept for
//! reuse instead of mapped and unmapped per batch.
//!
//! glibc gives each thread that allocates while another holds an arena an arena of its own, up
//! to eight per core. The pipeline's large blocks (a batch's slice, about 5 MB, and the copy
//! read back) are allocated and freed on the runtime's threads and on its blocking threads
//! (decoding, hashing, the file store's reads); every arena kept the free space of the blocks
//! that passed through it. Peak RSS grew with the number of batches: 59.9 MiB over 1,000,000
//! rows and 75.3 MiB over 5,000,000 (`scripts/bench`, 20,000-row batches). With one arena the
//! same runs peaked at 20.1 and 25.3 MiB, as fast (2.69 against 2.79 s and 14.29 against
//! 14.18 s, one run each): the process allocates a few large blocks a batch, so threads hardly
//! ever wait for the arena.
//!
//! glibc also maps a block past its mmap threshold afresh and unmaps it when freed (the
//! threshold adapts, and the heap's free top is trimmed past twice it): every batch then paid
//! for zeroing and faulting in its slices again, about a sixth of the archiver's CPU in `perf`
//! (`clear_page_erms`, `exc_page_fault`). With the threshold at its 32 MiB maximum and the trim
//! threshold at 64 MiB, the freed blocks are reused; the peak stays that of two batches.
//!
//! `GLIBC_TUNABLES` (or `MALLOC_ARENA_MAX`) in the environment wins: glibc reads it before
//! `main`, and a process started with it is left as it is.

/// The mmap threshold: glibc's largest (`DEFAULT_MMAP_THRESHOLD_MAX` on 64-bit).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const MMAP_THRESHOLD: i32 = 32 << 20;

/// Free memory at the heap's top kept rather than given back.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const TRIM_THRESHOLD: i32 = 64 << 20;

/// Sets the allocator up as described above, unless the environment tuned it. Call first in
/// `main`, before any thread starts.
pub fn tune() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        if std::env::var_os("GLIBC_TUNABLES").is_some()
            || std::env::var_os("MALLOC_ARENA_MAX").is_some()
        {
            return;
        }
        // SAFETY: mallopt only changes malloc parameters; called before any other thread
        // exists, so no allocation runs concurrently with the change. A refused setting
        // (return value 0) leaves glibc's default, which is correct, only larger or slower.
        #[allow(unsafe_code)]
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, 1);
            libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
            libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD);
        }
    }
}
