//! A stream's answer: the call's response head, then its body's DATA and trailers, within the
//! client's windows and the connection's output bound.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use http::Response;
use http_body::Body;

use super::{Outcome, Reply, Stream};
use crate::fields;
use crate::frame::{self, Reason};

/// Advances one stream's answer: the call's response head, then its body's frames within the
/// windows and `room` bytes of output.
pub(super) fn drive<F, B, E>(
    stream: &mut Stream<F, B>,
    cx: &mut Context<'_>,
    out: &mut Vec<u8>,
    connection_window: &mut i64,
    max_frame: usize,
    room: usize,
) -> Outcome
where
    F: Future<Output = std::result::Result<Response<B>, E>> + Unpin,
    E: Into<crate::BoxError>,
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<crate::BoxError>,
{
    if let Reply::Calling(call) = &mut stream.reply {
        match Pin::new(call).poll(cx) {
            Poll::Pending => return Outcome::Pending,
            Poll::Ready(Err(error)) => {
                let error: crate::BoxError = error.into();
                tracing::debug!(stream = stream.id, %error, "A call failed.");
                return Outcome::Reset(Reason::INTERNAL_ERROR);
            }
            Poll::Ready(Ok(response)) => {
                let (parts, body) = response.into_parts();
                let end = body.is_end_stream();
                frame::headers(out, stream.id, end, max_frame, |out| fields::encode_response(out, &parts));
                if end {
                    return Outcome::Done;
                }
                stream.reply = Reply::Sending(body);
            }
        }
    }
    let Reply::Sending(body) = &mut stream.reply else { return Outcome::Pending };
    let start = out.len();
    loop {
        if !stream.chunk.is_empty() {
            let window = stream.send_window.min(*connection_window).max(0) as usize;
            let n = stream.chunk.len().min(window).min(max_frame).min(room.saturating_sub(out.len() - start));
            if n == 0 {
                return Outcome::Pending;
            }
            frame::data(out, stream.id, &stream.chunk[..n], false);
            stream.chunk.advance(n);
            stream.send_window -= n as i64;
            *connection_window -= n as i64;
            continue;
        }
        if out.len() - start >= room {
            return Outcome::Pending;
        }
        match Pin::new(&mut *body).poll_frame(cx) {
            Poll::Pending => return Outcome::Pending,
            Poll::Ready(None) => {
                frame::data(out, stream.id, &[], true);
                return Outcome::Done;
            }
            Poll::Ready(Some(Err(error))) => {
                let error: crate::BoxError = error.into();
                tracing::debug!(stream = stream.id, %error, "A response body failed.");
                return Outcome::Reset(Reason::INTERNAL_ERROR);
            }
            Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                Ok(data) => stream.chunk = data,
                Err(frame) => {
                    if let Ok(trailers) = frame.into_trailers() {
                        frame::headers(out, stream.id, true, max_frame, |out| fields::encode_trailers(out, &trailers));
                        return Outcome::Done;
                    }
                }
            },
        }
    }
}
