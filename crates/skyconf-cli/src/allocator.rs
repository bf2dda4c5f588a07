//! The global allocator (mimalloc, with the default `mimalloc` feature) and what keeps its memory
//! from staying at a spike's high-water mark.
//!
//! mimalloc gives freed pages back to the OS lazily, from the thread that owns them, when that
//! thread allocates again. On a tokio runtime memory is often freed by another worker than the one
//! that allocated it (work stealing), and after a spike (thousands of connections, a huge document)
//! the owning threads may go idle: the server would then keep its peak RSS for good (reliability
//! finding F18). So each worker, when it parks with nothing to do, asks mimalloc to collect its heap, at
//! most once per [`COLLECT_EVERY`], which costs nothing measurable under load (a busy worker parks
//! rarely, and the call is rate-limited) and returns an idle server's memory.

use std::cell::Cell;
use std::time::{Duration, Instant};

// mimalloc: the reader allocates and frees many small nodes per document, where glibc's malloc
// spent 40 % of a 10,000-service reload (see BENCHMARKS.md).
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// How often a worker may collect.
const COLLECT_EVERY: Duration = Duration::from_secs(1);

thread_local! {
    static LAST_COLLECT: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// For `tokio::runtime::Builder::on_thread_park`: collects this thread's free memory, at most once
/// per [`COLLECT_EVERY`].
pub(crate) fn collect_when_idle() {
    let now = Instant::now();
    let due = LAST_COLLECT.with(|last| match last.get() {
        Some(at) if now.duration_since(at) < COLLECT_EVERY => false,
        _ => {
            last.set(Some(now));
            true
        }
    });
    if due {
        collect();
    }
}

#[cfg(feature = "mimalloc")]
#[allow(unsafe_code)]
fn collect() {
    // SAFETY: mi_collect only walks the calling thread's own heap and may be called at any time;
    // `false` does not force the collection of memory other threads still use.
    unsafe { libmimalloc_sys::mi_collect(false) }
}

#[cfg(not(feature = "mimalloc"))]
fn collect() {}
