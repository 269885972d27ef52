//! How the process allocates: one malloc arena for every thread.
//!
//! glibc gives each thread that allocates while another holds an arena an arena of its own, up
//! to eight per core. The pipeline's large blocks (a batch's slice, about 5 MB, and the copy
//! read back) are allocated and freed on the runtime's threads and on its blocking threads
//! (decoding, hashing, the file store's reads); every arena keeps the free space of the blocks
//! that passed through it. Peak RSS
//! grew with the number of batches: 59.9 MiB over 1,000,000 rows and 75.3 MiB over 5,000,000
//! (`scripts/bench`, 20,000-row batches). With one arena the same runs peaked at 20.1 and
//! 25.3 MiB, as fast (2.69 against 2.79 s and 14.29 against 14.18 s, one run each): the
//! process allocates a few large blocks a batch, so threads hardly ever wait for the arena.
//! `GLIBC_TUNABLES=glibc.malloc.arena_max=N` in the environment still wins (glibc reads it
//! before `main`, and this leaves an explicit setting alone).

/// Limits the process to one malloc arena, unless the environment set a limit. Call first in
/// `main`, before any thread starts.
pub fn one_arena() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let tuned = std::env::var("GLIBC_TUNABLES").is_ok_and(|t| t.contains("arena_max"))
            || std::env::var_os("MALLOC_ARENA_MAX").is_some();
        if !tuned {
            // SAFETY: mallopt only changes a malloc parameter; called before any other thread
            // exists, so no allocation runs concurrently with the change. A refused setting
            // (return value 0) leaves glibc's default, which is correct, only larger.
            #[allow(unsafe_code)]
            unsafe {
                libc::mallopt(libc::M_ARENA_MAX, 1);
            }
        }
    }
}
