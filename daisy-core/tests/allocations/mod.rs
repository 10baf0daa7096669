//! A global allocator that counts, for the tests that bound what a piece
//! of code allocates: a test binary that declares `mod allocations;`
//! counts every allocation of its process.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

/// Bytes allocated now, and the most since a measurement began.
static NOW: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

struct Counting;

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let now = NOW.fetch_add(layout.size(), Relaxed) + layout.size();
        PEAK.fetch_max(now, Relaxed);
        System.alloc(layout)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        NOW.fetch_sub(layout.size(), Relaxed);
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

/// Runs `run` and measures what it allocated. Tests in one binary run
/// on threads of one process: a binary that measures has one test, or
/// tests whose allocations at the same time do not matter.
pub fn allocated_while<T>(run: impl FnOnce() -> T) -> (T, Allocated) {
    let before = NOW.load(Relaxed);
    PEAK.store(before, Relaxed);
    let value = run();
    let allocated = Allocated {
        peak: PEAK.load(Relaxed) - before,
        kept: NOW.load(Relaxed) - before,
    };
    (value, allocated)
}
