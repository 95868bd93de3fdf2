//! What the fuzz targets share: the bound on a single allocation ([`within`]), and the
//! subscription their pushes are for.
//!
//! A crash, a panic and a hang (libFuzzer's `-timeout`) are libFuzzer's to catch; an allocation
//! out of proportion to the input is this crate's: every allocation on the thread running the
//! code under test is seen by a global allocator that keeps the largest, and [`within`] panics
//! when it passes the bound, which libFuzzer then reports as a crash with the input.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// The subscription the targets' endpoints serve.
pub const SUBSCRIPTION: &str = "projects/p/subscriptions/orders";

/// What any input may allocate at once, whatever its size: buffers, maps and the like.
pub const ALLOWANCE: usize = 64 * 1024;

/// How many times its own size an input may take at once, on top of [`ALLOWANCE`]: a copy
/// that doubles as it grows, base64 decoded, a map of what it holds.
pub const PER_INPUT_BYTE: usize = 4;

thread_local! {
    /// Whether this thread's allocations are being watched.
    static WATCHING: Cell<bool> = const { Cell::new(false) };
    /// The largest allocation seen while watching.
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

/// The system allocator, keeping the largest allocation of a watched thread.
struct Watched;

fn seen(size: usize) {
    let _ = WATCHING.try_with(|watching| {
        if watching.get() {
            let _ = LARGEST.try_with(|largest| largest.set(largest.get().max(size)));
        }
    });
}

// SAFETY: every call is passed on to the system allocator unchanged; `seen` does not allocate.
unsafe impl GlobalAlloc for Watched {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        seen(layout.size());
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        seen(layout.size());
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        seen(new_size);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Watched = Watched;

/// The bound for an input of `len` bytes: [`ALLOWANCE`] and [`PER_INPUT_BYTE`] per byte.
pub fn bound(len: usize) -> usize {
    ALLOWANCE + PER_INPUT_BYTE * len
}

/// Runs `f` on this thread and panics if one of its allocations was larger than `limit` bytes.
pub fn within<T>(limit: usize, f: impl FnOnce() -> T) -> T {
    LARGEST.with(|l| l.set(0));
    WATCHING.with(|w| w.set(true));
    let value = f();
    WATCHING.with(|w| w.set(false));
    let largest = LARGEST.with(Cell::get);
    assert!(
        largest <= limit,
        "one allocation of {largest} bytes, over the bound of {limit} for this input"
    );
    value
}
