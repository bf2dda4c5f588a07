//! Instance identity read in passing: the request message of
//! `ManagementService/reportInstanceProperties` and `keepAlive` is copied as it streams to the
//! OAP, decoded once complete, and recorded in the fleet table against the agent's connection.
//! The bytes sent on are never altered or delayed; a message that is compressed, too large or
//! not decodable is simply not recorded.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Body;
use bytes::{Bytes, BytesMut};
use http_body::Frame;
use prost::Message;
use skyconf_proto::v3::{InstancePingPkg, InstanceProperties};

use crate::fleet::{Caller, Fleet, InstanceIdentity};

/// The largest management message read for identity (the limit of the local service).
const MAX_MESSAGE_BYTES: usize = crate::fleet::management::MAX_REQUEST_BYTES;

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

/// The identity a management request message carries.
pub fn decode(call: ManagementCall, message: &[u8], agent_version: Option<String>) -> Option<InstanceIdentity> {
    match call {
        ManagementCall::ReportInstanceProperties => {
            let properties = InstanceProperties::decode(message).ok()?;
            Some(InstanceIdentity {
                service: properties.service,
                instance: properties.service_instance,
                properties: properties.properties.into_iter().map(|p| (p.key, p.value)).collect(),
                agent_version,
                reported_properties: true,
            })
        }
        ManagementCall::KeepAlive => {
            let ping = InstancePingPkg::decode(message).ok()?;
            Some(InstanceIdentity {
                service: ping.service,
                instance: ping.service_instance,
                properties: Vec::new(),
                agent_version,
                reported_properties: false,
            })
        }
    }
}

/// A request body passed on unchanged, whose first message is decoded for identity.
#[derive(Debug)]
pub struct IdentityTap {
    inner: Body,
    call: ManagementCall,
    caller: Caller,
    agent_version: Option<String>,
    fleet: Arc<Fleet>,
    /// The first message's bytes so far; `None` once read (or given up on).
    copy: Option<BytesMut>,
}

impl IdentityTap {
    /// Taps `inner`, a `call` of `caller` (its connection: the identity ends with it).
    pub fn new(
        inner: Body,
        call: ManagementCall,
        caller: impl Into<Caller>,
        agent_version: Option<String>,
        fleet: Arc<Fleet>,
    ) -> Self {
        Self { inner, call, caller: caller.into(), agent_version, fleet, copy: Some(BytesMut::new()) }
    }

    /// Copies what is still missing of the first message from `data`; records the identity once
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
                    if let Some(identity) = decode(self.call, &copy[HEADER_BYTES..], self.agent_version.take()) {
                        self.fleet.identify(&self.caller, &identity);
                    }
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

impl http_body::Body for IdentityTap {
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
    use crate::fleet::FleetOptions;
    use http_body_util::BodyExt;
    use skyconf_proto::v3::KeyStringValuePair;
    use std::net::SocketAddr;

    fn framed(message: &impl Message) -> Vec<u8> {
        let encoded = message.encode_to_vec();
        let mut out = vec![0];
        out.extend_from_slice(&(encoded.len() as u32).to_be_bytes());
        out.extend_from_slice(&encoded);
        out
    }

    fn properties() -> InstanceProperties {
        InstanceProperties {
            service: "order".into(),
            service_instance: "pod-1@10.0.0.7".into(),
            properties: vec![
                KeyStringValuePair { key: "hostname".into(), value: "pod-1".into() },
                KeyStringValuePair { key: "ipv4".into(), value: "10.0.0.7".into() },
                KeyStringValuePair { key: "ipv4".into(), value: "172.17.0.1".into() },
            ],
            ..Default::default()
        }
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

    /// The instance the fleet shows for the tapped connection once it polls.
    fn instance_of(fleet: &Fleet) -> Option<String> {
        let digest = skyconf_core::Digest::of_text("d");
        fleet.observe("order", "", "10.0.0.7:40000".parse().unwrap(), &digest, true);
        fleet.agents_of("order", &digest).pop()?.instance
    }

    /// Sends `bytes` through a tap in chunks of `chunk`, returning what came out and the fleet.
    async fn through_tap(bytes: Vec<u8>, chunk: usize, call: ManagementCall) -> (Vec<u8>, Arc<Fleet>) {
        let fleet = Arc::new(Fleet::new(FleetOptions::default()));
        let chunks: Vec<Result<Frame<Bytes>, std::convert::Infallible>> =
            bytes.chunks(chunk).map(|c| Ok(Frame::data(Bytes::copy_from_slice(c)))).collect();
        let body = Body::new(http_body_util::StreamBody::new(futures_util::stream::iter(chunks)));
        let peer: SocketAddr = "10.0.0.7:40000".parse().unwrap();
        let tap = IdentityTap::new(body, call, peer, Some("9.3.0".into()), Arc::clone(&fleet));
        let out = tap.collect().await.unwrap().to_bytes().to_vec();
        (out, fleet)
    }

    #[tokio::test]
    async fn the_bytes_pass_unchanged_and_the_identity_is_recorded_however_the_message_is_split() {
        let bytes = framed(&properties());
        for chunk in [1, 2, 4, 5, 6, 7, 13, bytes.len()] {
            let (out, fleet) = through_tap(bytes.clone(), chunk, ManagementCall::ReportInstanceProperties).await;
            assert_eq!(out, bytes, "chunks of {chunk}");
            assert_eq!(instance_of(&fleet).as_deref(), Some("pod-1@10.0.0.7"), "chunks of {chunk}");
        }
    }

    #[tokio::test]
    async fn compressed_or_undecodable_messages_pass_and_are_not_recorded() {
        let mut compressed = framed(&properties());
        compressed[0] = 1;
        let (out, fleet) = through_tap(compressed.clone(), 3, ManagementCall::ReportInstanceProperties).await;
        assert_eq!(out, compressed);
        assert_eq!(instance_of(&fleet), None);

        let garbage = vec![0, 0, 0, 0, 3, 0xff, 0xff, 0xff];
        let (out, fleet) = through_tap(garbage.clone(), 3, ManagementCall::KeepAlive).await;
        assert_eq!(out, garbage);
        assert_eq!(instance_of(&fleet), None);
    }

    #[test]
    fn decoding_keeps_every_property_in_order_and_the_agent_version() {
        let message = properties().encode_to_vec();
        let identity = decode(ManagementCall::ReportInstanceProperties, &message, Some("9.3.0".into())).unwrap();
        assert_eq!(identity.service, "order");
        assert_eq!(identity.properties.len(), 3);
        assert_eq!(identity.properties[2], ("ipv4".to_owned(), "172.17.0.1".to_owned()));
        assert_eq!(identity.agent_version.as_deref(), Some("9.3.0"));
        assert!(identity.reported_properties);
        let ping = InstancePingPkg { service: "order".into(), service_instance: "pod-1".into(), ..Default::default() };
        let identity = decode(ManagementCall::KeepAlive, &ping.encode_to_vec(), None).unwrap();
        assert!(!identity.reported_properties && identity.properties.is_empty());
    }
}
