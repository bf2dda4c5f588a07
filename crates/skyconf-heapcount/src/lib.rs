//! The system allocator with a count of the bytes in use, for test binaries that measure what a
//! connection, a held call or a fleet entry costs on the heap.
//!
//! A crate of its own, depended on only as a dev-dependency: the binaries that measure sit below
//! skyconf-testkit (skyconf-h2 is a dependency of the server the testkit starts), so the testkit
//! cannot hold it. A binary installs it as its global allocator and reads [`in_use`] before and
//! after the thing it measures:
//!
//! ```
//! #[global_allocator]
//! static ALLOCATOR: skyconf_heapcount::Counting = skyconf_heapcount::Counting;
//!
//! fn main() {
//!     let before = skyconf_heapcount::in_use();
//!     let kept = vec![0u8; 4096];
//!     assert!(skyconf_heapcount::in_use() - before >= 4096);
//!     drop(kept);
//! }
//! ```
//!
//! The count is process-wide: the binary keeps other work from allocating between its two
//! readings.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

/// The system allocator, counting the bytes in use; install it as the `#[global_allocator]`.
#[derive(Debug, Clone, Copy)]
pub struct Counting;

static IN_USE: AtomicIsize = AtomicIsize::new(0);

/// The bytes allocated through [`Counting`] and not yet freed.
pub fn in_use() -> isize {
    IN_USE.load(Ordering::SeqCst)
}

// SAFETY: every call is passed on to the system allocator unchanged; only a counter is added.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        IN_USE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        IN_USE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        IN_USE.fetch_add(new_size as isize - layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}
