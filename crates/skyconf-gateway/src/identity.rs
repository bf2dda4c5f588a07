//! Instance identity read in passing: the first request message of
//! `ManagementService/reportInstanceProperties` and `keepAlive` is copied as it streams to the
//! OAP and, once complete, handed to the call's [`Agent`], which decodes and records it against
//! the agent's connection. The bytes sent on are never altered or delayed; a message that is
//! compressed or too large is not handed on.

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::Body;
use bytes::{Bytes, BytesMut};
use http_body::Frame;

use crate::Agent;

/// The largest management message read for identity: the request limit of the server's own
/// `ManagementService`.
pub const MAX_MESSAGE_BYTES: usize = 256 * 1024;

/// The gRPC message header: a compression flag and a big-endian length.
const HEADER_BYTES: usize = 5;

/// Which management call a request is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ManagementCall {
    /// `reportInstanceProperties`: the instance and its properties.
    ReportInstanceProperties,
    /// `keepAlive`: the instance only.
    KeepAlive,
}

/// The management call at `path`, if it is one.
pub fn call_of(path: &str) -> Option<ManagementCall> {
    let method = path.strip_prefix("/skywalking.v3.ManagementService/")?;
    match method {
        "reportInstanceProperties" => Some(ManagementCall::ReportInstanceProperties),
        "keepAlive" => Some(ManagementCall::KeepAlive),
        _ => None,
    }
}

/// A request body passed on unchanged, whose first message is handed to its agent for identity.
#[derive(Debug)]
pub struct IdentityTap<A> {
    inner: Body,
    call: ManagementCall,
    agent: A,
    agent_version: Option<String>,
    /// The first message's bytes so far; `None` once read (or given up on).
    copy: Option<BytesMut>,
}

impl<A: Agent> IdentityTap<A> {
    /// Taps `inner`, a `call` on `agent`'s connection (the identity ends with it).
    pub fn new(inner: Body, call: ManagementCall, agent: A, agent_version: Option<String>) -> Self {
        Self { inner, call, agent, agent_version, copy: Some(BytesMut::new()) }
    }

    /// Copies what is still missing of the first message from `data`; hands it to the agent once
    /// it is complete.
    fn take(&mut self, mut data: &[u8]) {
        while let Some(copy) = &mut self.copy {
            let length = message_length(copy);
            if let Some(length) = length {
                if copy[0] != 0 || length > MAX_MESSAGE_BYTES {
                    // Compressed, or larger than any identity: not read.
                    self.copy = None;
                    return;
                }
                if copy.len() == HEADER_BYTES + length {
                    self.agent.identify(self.call, &copy[HEADER_BYTES..], self.agent_version.take());
                    self.copy = None;
                    return;
                }
            }
            if data.is_empty() {
                return;
            }
            let wanted = length.map_or(HEADER_BYTES, |length| HEADER_BYTES + length);
            let more = (wanted - copy.len()).min(data.len());
            copy.extend_from_slice(&data[..more]);
            data = &data[more..];
        }
    }
}

/// The length field of a message header, once the header is complete.
fn message_length(header: &[u8]) -> Option<usize> {
    let bytes: [u8; 4] = header.get(1..HEADER_BYTES)?.try_into().ok()?;
    Some(u32::from_be_bytes(bytes) as usize)
}

impl<A: Agent> http_body::Body for IdentityTap<A> {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled
            && let Some(data) = frame.data_ref()
        {
            let data = data.clone();
            self.take(&data);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upstream::Pin as UpstreamPin;
    use http_body_util::BodyExt;
    use prost::Message;
    use skyconf_proto::fixtures::instance_properties;
    use skyconf_proto::v3::{InstancePingPkg, InstanceProperties};
    use std::sync::{Arc, Mutex};

    fn framed(message: &impl Message) -> Vec<u8> {
        let encoded = message.encode_to_vec();
        let mut out = vec![0];
        out.extend_from_slice(&(encoded.len() as u32).to_be_bytes());
        out.extend_from_slice(&encoded);
        out
    }

    #[test]
    fn the_management_paths_are_recognised() {
        assert_eq!(
            call_of("/skywalking.v3.ManagementService/reportInstanceProperties"),
            Some(ManagementCall::ReportInstanceProperties)
        );
        assert_eq!(call_of("/skywalking.v3.ManagementService/keepAlive"), Some(ManagementCall::KeepAlive));
        assert_eq!(call_of("/skywalking.v3.ManagementService/other"), None);
        assert_eq!(call_of("/skywalking.v3.TraceSegmentReportService/collect"), None);
    }

    /// An agent connection that decodes what it is handed, as the server's does, and keeps the
    /// instance it names.
    #[derive(Debug, Default, Clone)]
    struct Recorded(Arc<Mutex<Option<Identity>>>);

    /// The instance a message named, and the agent version sent with it.
    type Identity = (String, Option<String>);

    impl Agent for Recorded {
        fn pin(&self) -> Option<&UpstreamPin> {
            None
        }

        fn identify(&self, call: ManagementCall, message: &[u8], agent_version: Option<String>) {
            let instance = match call {
                ManagementCall::ReportInstanceProperties => {
                    InstanceProperties::decode(message).ok().map(|p| p.service_instance)
                }
                ManagementCall::KeepAlive => InstancePingPkg::decode(message).ok().map(|p| p.service_instance),
            };
            if let Some(instance) = instance {
                *self.0.lock().unwrap() = Some((instance, agent_version));
            }
        }
    }

    impl Recorded {
        /// The instance recorded for the tapped connection.
        fn instance(&self) -> Option<String> {
            self.0.lock().unwrap().as_ref().map(|(instance, _)| instance.clone())
        }
    }

    /// Sends `bytes` through a tap in chunks of `chunk`, returning what came out and the agent.
    async fn through_tap(bytes: Vec<u8>, chunk: usize, call: ManagementCall) -> (Vec<u8>, Recorded) {
        let agent = Recorded::default();
        let chunks: Vec<Result<Frame<Bytes>, std::convert::Infallible>> =
            bytes.chunks(chunk).map(|c| Ok(Frame::data(Bytes::copy_from_slice(c)))).collect();
        let body = Body::new(http_body_util::StreamBody::new(futures_util::stream::iter(chunks)));
        let tap = IdentityTap::new(body, call, agent.clone(), Some("9.3.0".into()));
        let out = tap.collect().await.unwrap().to_bytes().to_vec();
        (out, agent)
    }

    #[tokio::test]
    async fn the_bytes_pass_unchanged_and_the_identity_is_recorded_however_the_message_is_split() {
        let bytes = framed(&instance_properties());
        for chunk in [1, 2, 4, 5, 6, 7, 13, bytes.len()] {
            let (out, agent) = through_tap(bytes.clone(), chunk, ManagementCall::ReportInstanceProperties).await;
            assert_eq!(out, bytes, "chunks of {chunk}");
            assert_eq!(agent.instance().as_deref(), Some("pod-1@10.0.0.7"), "chunks of {chunk}");
            assert_eq!(agent.0.lock().unwrap().as_ref().unwrap().1.as_deref(), Some("9.3.0"));
        }
    }

    #[tokio::test]
    async fn compressed_or_undecodable_messages_pass_and_are_not_recorded() {
        let mut compressed = framed(&instance_properties());
        compressed[0] = 1;
        let (out, agent) = through_tap(compressed.clone(), 3, ManagementCall::ReportInstanceProperties).await;
        assert_eq!(out, compressed);
        assert_eq!(agent.instance(), None);

        let garbage = vec![0, 0, 0, 0, 3, 0xff, 0xff, 0xff];
        let (out, agent) = through_tap(garbage.clone(), 3, ManagementCall::KeepAlive).await;
        assert_eq!(out, garbage);
        assert_eq!(agent.instance(), None);
    }
}
