//! A global allocator that counts, for the tests that bound what a piece
//! of code allocates: a test binary that declares `mod allocations;`
//! counts the allocations of each of its threads. Per thread, because a
//! test shares its process with the harness's own threads, which may
//! allocate (and keep) a few hundred bytes while a measured run goes on.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

thread_local! {
    /// Bytes this thread allocated less those it freed (negative when it
    /// frees what another thread allocated), and the most since a
    /// measurement began. Const-initialised: reading them allocates
    /// nothing, as an allocator must.
    static NOW: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

struct Counting;

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // Not during the thread's teardown, when its locals are gone.
        let _ = NOW.try_with(|now| {
            let grown = now.get() + layout.size() as isize;
            now.set(grown);
            let _ = PEAK.try_with(|peak| peak.set(peak.get().max(grown)));
        });
        System.alloc(layout)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let _ = NOW.try_with(|now| now.set(now.get() - layout.size() as isize));
        System.dealloc(ptr, layout)
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

/// What `run` allocated, in bytes beyond what was allocated before it.
pub struct Allocated {
    /// The most at any one time.
    pub peak: usize,
    /// Still allocated when it returned (what it returns included).
    pub kept: usize,
}

/// Runs `run` on this thread and measures what it allocated there.
pub fn allocated_while<T>(run: impl FnOnce() -> T) -> (T, Allocated) {
    let before = NOW.with(Cell::get);
    PEAK.with(|peak| peak.set(before));
    let value = run();
    let allocated = Allocated {
        peak: (PEAK.with(Cell::get) - before).max(0) as usize,
        kept: (NOW.with(Cell::get) - before).max(0) as usize,
    };
    (value, allocated)
}
