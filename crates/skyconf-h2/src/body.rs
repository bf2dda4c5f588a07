//! A request's body ([`RecvBody`]): the DATA and trailers the connection has read for a stream
//! and the call has not yet taken.
//!
//! The connection and the call share one small state behind a lock (never held across an
//! `.await`): the connection appends what it reads, the call takes it, and what the call has
//! taken is what the connection may credit back to the client (WINDOW_UPDATE). So the client
//! can have at most a window's worth of unread data waiting per stream, and a call that stops
//! reading stops its client. A request sent with END_STREAM on its HEADERS has no shared state
//! at all.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};

use crate::frame::Reason;

/// The body of a request: the stream's DATA frames, then its trailers, if any.
#[derive(Debug, Default)]
pub struct RecvBody {
    shared: Option<Arc<Mutex<Shared>>>,
}

/// The body ended without its END_STREAM: the stream was reset (by the client, or by the
/// server because the client broke the protocol on it) or its connection closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the request stream was reset ({0})")]
pub struct RecvError(pub Reason);

#[derive(Debug, Default)]
pub(crate) struct Shared {
    chunks: VecDeque<Bytes>,
    trailers: Option<HeaderMap>,
    end: bool,
    reset: Option<Reason>,
    /// The call's task, waiting for more.
    consumer: Option<Waker>,
    /// The connection's task, waiting to credit what was taken.
    connection: Option<Waker>,
    /// Bytes taken since the connection last looked.
    consumed: usize,
    /// Bytes appended and not yet taken.
    buffered: usize,
    /// The body was dropped: nothing more will be taken.
    dropped: bool,
}

fn lock(shared: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    // The state stays consistent whatever panicked while it was locked (each update is whole).
    shared.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl RecvBody {
    /// A body with nothing in it (the request's HEADERS ended the stream).
    pub fn empty() -> Self {
        Self { shared: None }
    }

    /// A body fed through the returned handle.
    pub(crate) fn channel() -> (Self, Feed) {
        let shared = Arc::new(Mutex::new(Shared::default()));
        (Self { shared: Some(Arc::clone(&shared)) }, Feed { shared })
    }
}

impl Body for RecvBody {
    type Data = Bytes;
    type Error = RecvError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, RecvError>>> {
        let Some(shared) = &self.shared else { return Poll::Ready(None) };
        let mut state = lock(shared);
        if let Some(chunk) = state.chunks.pop_front() {
            state.buffered -= chunk.len();
            let was = state.consumed;
            state.consumed += chunk.len();
            if was == 0
                && let Some(waker) = &state.connection
            {
                waker.wake_by_ref();
            }
            return Poll::Ready(Some(Ok(Frame::data(chunk))));
        }
        if let Some(reason) = state.reset {
            return Poll::Ready(Some(Err(RecvError(reason))));
        }
        if let Some(trailers) = state.trailers.take() {
            return Poll::Ready(Some(Ok(Frame::trailers(trailers))));
        }
        if state.end {
            return Poll::Ready(None);
        }
        if !state.consumer.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            state.consumer = Some(cx.waker().clone());
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.shared.as_ref().is_none_or(|shared| {
            let state = lock(shared);
            state.end && state.chunks.is_empty() && state.trailers.is_none()
        })
    }

    fn size_hint(&self) -> SizeHint {
        if self.is_end_stream() { SizeHint::with_exact(0) } else { SizeHint::default() }
    }
}

impl Drop for RecvBody {
    fn drop(&mut self) {
        if let Some(shared) = &self.shared {
            let mut state = lock(shared);
            state.dropped = true;
            state.chunks = VecDeque::new();
            if let Some(waker) = state.connection.take() {
                waker.wake();
            }
        }
    }
}

/// The connection's side of a [`RecvBody`].
#[derive(Debug)]
pub(crate) struct Feed {
    shared: Arc<Mutex<Shared>>,
}

impl Feed {
    /// Appends `data`; false if the body was dropped (the data is discarded).
    pub(crate) fn data(&self, data: Bytes, connection: &Waker) -> bool {
        let mut state = lock(&self.shared);
        if state.dropped {
            return false;
        }
        if !state.connection.as_ref().is_some_and(|w| w.will_wake(connection)) {
            state.connection = Some(connection.clone());
        }
        state.buffered += data.len();
        state.chunks.push_back(data);
        Self::wake(&mut state);
        true
    }

    /// The request's trailers; the body ends after them.
    pub(crate) fn trailers(&self, trailers: HeaderMap) {
        let mut state = lock(&self.shared);
        state.trailers = Some(trailers);
        state.end = true;
        Self::wake(&mut state);
    }

    /// The body ends (END_STREAM).
    pub(crate) fn end(&self) {
        let mut state = lock(&self.shared);
        state.end = true;
        Self::wake(&mut state);
    }

    /// The stream was reset: the body ends with an error unless it had already ended.
    pub(crate) fn reset(&self, reason: Reason) {
        let mut state = lock(&self.shared);
        if !state.end {
            state.reset = Some(reason);
            state.chunks = VecDeque::new();
            state.buffered = 0;
        }
        Self::wake(&mut state);
    }

    /// Bytes taken since the last call, and whether the body was dropped (then what it still
    /// buffered counts as taken: it never will be).
    pub(crate) fn take_consumed(&self) -> (usize, bool) {
        let mut state = lock(&self.shared);
        let mut consumed = std::mem::take(&mut state.consumed);
        if state.dropped {
            consumed += std::mem::take(&mut state.buffered);
        }
        (consumed, state.dropped)
    }

    /// Bytes appended and not taken (what the connection credits back when the stream goes).
    pub(crate) fn unconsumed(&self) -> usize {
        let state = lock(&self.shared);
        state.buffered + state.consumed
    }

    fn wake(state: &mut Shared) {
        if let Some(waker) = state.consumer.take() {
            waker.wake();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn data_then_trailers_then_end_and_what_was_taken_is_counted() {
        let (mut body, feed) = RecvBody::channel();
        let waker = futures_waker();
        assert!(feed.data(Bytes::from_static(b"abc"), &waker));
        assert!(feed.data(Bytes::from_static(b"de"), &waker));
        let mut trailers = HeaderMap::new();
        trailers.insert("x", "1".parse().unwrap());
        feed.trailers(trailers);
        assert_eq!(body.frame().await.unwrap().unwrap().into_data().unwrap(), "abc");
        assert_eq!(feed.take_consumed(), (3, false));
        assert_eq!(body.frame().await.unwrap().unwrap().into_data().unwrap(), "de");
        assert!(body.frame().await.unwrap().unwrap().is_trailers());
        assert!(body.frame().await.is_none());
        assert!(body.is_end_stream());
        drop(body);
        assert!(!feed.data(Bytes::from_static(b"late"), &waker), "a dropped body takes nothing");
    }

    #[tokio::test]
    async fn a_reset_ends_the_body_with_an_error() {
        let (mut body, feed) = RecvBody::channel();
        feed.reset(Reason::CANCEL);
        assert_eq!(body.frame().await.unwrap().unwrap_err(), RecvError(Reason::CANCEL));
    }

    fn futures_waker() -> Waker {
        Waker::noop().clone()
    }
}
