//! The launcher's notice board in shared memory: the launcher's pid, and requests for a visit
//! posted by backends (`retention.wake()`) and by workers ending a visit (the cycle was cut by
//! the visit bound; the extension is not installed). The launcher has no database, so this is
//! the only way a database can speak to it. Allocated only when the library is preloaded.

use pgrx::prelude::*;
use pgrx::shmem::PGRXSharedMemory;
use pgrx::{pg_shmem_init, PgLwLock};

/// Longest database name PostgreSQL allows, with its terminating NUL (NAMEDATALEN).
const NAME_BYTES: usize = 64;
/// Requests the board holds at once; a post to a full board is refused (and said so).
const SLOTS: usize = 64;

/// Why a database asks for a visit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    /// `retention.wake()`: visit now.
    Wake,
    /// A visit ended at the visit bound with policies left: visit again, after those waiting.
    Unfinished,
    /// A visit found no pg_retention in the database: look again later.
    NoExtension,
}

impl Request {
    fn code(self) -> u8 {
        match self {
            Request::Wake => 1,
            Request::Unfinished => 2,
            Request::NoExtension => 3,
        }
    }

    fn from_code(code: u8) -> Option<Request> {
        match code {
            1 => Some(Request::Wake),
            2 => Some(Request::Unfinished),
            3 => Some(Request::NoExtension),
            _ => None,
        }
    }
}

#[derive(Clone, Copy)]
struct Slot {
    /// 0: free; otherwise a [`Request`] code.
    kind: u8,
    name: [u8; NAME_BYTES],
}

#[derive(Clone, Copy)]
struct Board {
    launcher_pid: i32,
    slots: [Slot; SLOTS],
}

// Safety: plain old data (integers and byte arrays), no pointers.
unsafe impl PGRXSharedMemory for Board {}

const EMPTY: Board = Board {
    launcher_pid: 0,
    slots: [Slot {
        kind: 0,
        name: [0; NAME_BYTES],
    }; SLOTS],
};

// Safety: the name is a unique, static C string, as PgLwLock requires.
static BOARD: PgLwLock<Board> = unsafe { PgLwLock::new(c"pg_retention board") };

/// Reserves the board. Called from `_PG_init` while shared_preload_libraries loads.
// pgrx's macro names the features of every PostgreSQL major it supports, not only ours.
#[allow(unexpected_cfgs)]
pub fn init() {
    pg_shmem_init!(BOARD = EMPTY);
}

/// Notes the launcher's pid (0 when it stops).
pub fn set_launcher(pid: i32) {
    BOARD.exclusive().launcher_pid = pid;
}

/// The launcher's pid, if one runs. Only when preloaded (the board exists).
pub fn launcher_pid() -> Option<i32> {
    if !super::preloaded() {
        return None;
    }
    Some(BOARD.share().launcher_pid).filter(|pid| *pid > 0)
}

/// Posts `request` for `database` (a request already posted for it is replaced) and sets the
/// launcher's latch. False when the board is full, the name too long, or not preloaded.
pub fn post(database: &str, request: Request) -> bool {
    let bytes = database.as_bytes();
    if !super::preloaded() || bytes.len() >= NAME_BYTES || bytes.contains(&0) {
        return false;
    }
    let mut name = [0u8; NAME_BYTES];
    name[..bytes.len()].copy_from_slice(bytes);
    let launcher = {
        let mut board = BOARD.exclusive();
        let slot = board
            .slots
            .iter()
            .position(|s| s.kind != 0 && s.name == name)
            .or_else(|| board.slots.iter().position(|s| s.kind == 0));
        let Some(i) = slot else {
            return false;
        };
        board.slots[i] = Slot {
            kind: request.code(),
            name,
        };
        board.launcher_pid
    };
    if launcher > 0 {
        // Safety: BackendPidGetProc takes ProcArrayLock itself and returns NULL for a pid
        // that is not a live process; setting another process's latch is how PostgreSQL
        // wakes its own workers.
        unsafe {
            let proc_ = pg_sys::BackendPidGetProc(launcher);
            if !proc_.is_null() {
                pg_sys::SetLatch(&raw mut (*proc_).procLatch);
            }
        }
    }
    true
}

/// Takes every posted request off the board.
pub fn drain() -> Vec<(String, Request)> {
    let mut board = BOARD.exclusive();
    let mut out = Vec::new();
    for slot in board.slots.iter_mut() {
        if let Some(request) = Request::from_code(slot.kind) {
            let len = slot.name.iter().position(|b| *b == 0).unwrap_or(NAME_BYTES);
            out.push((
                String::from_utf8_lossy(&slot.name[..len]).into_owned(),
                request,
            ));
        }
        slot.kind = 0;
    }
    out
}
