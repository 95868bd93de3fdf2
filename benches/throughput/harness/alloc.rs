//! The counting global allocator: live heap bytes, for memory per outstanding message, and
//! allocations, for allocations per message (a figure that does not vary from run to run the
//! way CPU time does). Installed for the whole binary, every side and mode included.
//!
//! Uses the system allocator and nothing else of this benchmark.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};

/// Counts live heap bytes and allocations, then allocates from [`System`].
///
/// Sharded by thread: one pair of shared counters would bounce between the cores on every
/// allocation, a cost of this measurement that Leasehold's worker threads would pay and a
/// single-threaded loop would not.
struct Counting;

#[repr(align(128))]
struct Shard {
    live: AtomicI64,
    allocations: AtomicU64,
}

const SHARDS: usize = 16;
static COUNTERS: [Shard; SHARDS] = [const {
    Shard {
        live: AtomicI64::new(0),
        allocations: AtomicU64::new(0),
    }
}; SHARDS];
static NEXT_SHARD: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's shard; assigned on its first allocation (no allocation of its own).
    static SHARD: Cell<usize> = const { Cell::new(usize::MAX) };
}

fn shard() -> &'static Shard {
    let index = SHARD
        .try_with(|s| {
            if s.get() == usize::MAX {
                s.set(NEXT_SHARD.fetch_add(1, Ordering::Relaxed) % SHARDS);
            }
            s.get()
        })
        .unwrap_or(0);
    &COUNTERS[index]
}

/// Live heap bytes now, all threads.
pub(crate) fn live() -> usize {
    COUNTERS
        .iter()
        .map(|s| s.live.load(Ordering::Relaxed))
        .sum::<i64>()
        .max(0) as usize
}

/// Allocations so far, all threads.
pub(crate) fn allocations() -> u64 {
    COUNTERS
        .iter()
        .map(|s| s.allocations.load(Ordering::Relaxed))
        .sum()
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let shard = shard();
        shard
            .live
            .fetch_add(layout.size() as i64, Ordering::Relaxed);
        shard.allocations.fetch_add(1, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        shard()
            .live
            .fetch_sub(layout.size() as i64, Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;
