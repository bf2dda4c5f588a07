//! The worker's buffers: one read buffer and one write buffer per thread, lent to a connection
//! for one synchronous step of its task and given back before the step returns. A connection
//! keeps bytes of its own only for what does not fit that step: an incomplete frame, or what the
//! socket did not take.

use std::cell::Cell;

/// The read buffer's size: one read takes up to two whole frames of the advertised size.
pub(crate) const READ_BYTES: usize = 32 * 1024;

/// A write buffer grown past this by a burst is freed rather than kept for the next step.
const WRITE_KEPT_BYTES: usize = 256 * 1024;

thread_local! {
    static READ: Cell<Option<Box<[u8]>>> = const { Cell::new(None) };
    static WRITE: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
}

/// The worker's read buffer (a fresh one if another step on this thread holds it).
pub(crate) fn take_read() -> Box<[u8]> {
    READ.with(Cell::take).unwrap_or_else(|| vec![0; READ_BYTES].into_boxed_slice())
}

pub(crate) fn give_read(buffer: Box<[u8]>) {
    READ.with(|cell| cell.set(Some(buffer)));
}

/// The worker's write buffer, empty.
pub(crate) fn take_write() -> Vec<u8> {
    WRITE.with(Cell::take)
}

pub(crate) fn give_write(mut buffer: Vec<u8>) {
    buffer.clear();
    if buffer.capacity() <= WRITE_KEPT_BYTES {
        WRITE.with(|cell| cell.set(buffer));
    }
}
