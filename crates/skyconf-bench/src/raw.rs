//! Calls to any gRPC path with a body read from a file (`skyconf-bench --path P --body-file F`):
//! the forwarded calls of the gateway benchmark, where the method is not CDS. The file holds
//! framed messages (1 flag byte, 4 length bytes, the message), the same body h2load's `-d` sends;
//! one message makes a unary call, more a client stream. Messages go out as they are, answers
//! come back as bytes.

use std::sync::Arc;

use anyhow::Context as _;
use bytes::{Buf as _, BufMut as _, Bytes};
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::Channel;
use tonic::{Request, Response, Status};

/// `--path` and `--body-file`, for the load and for `bench agents`.
#[derive(Debug, Clone, clap::Args)]
pub(super) struct RawArgs {
    /// Call this gRPC path (e.g. `/skywalking.v3.JVMMetricReportService/collect`) instead of
    /// fetchConfigurations, with the body of --body-file; the answer must be an empty `Commands`
    /// (with `--check status`: any answer with grpc-status 0). --scenario and --services do not
    /// apply.
    #[arg(long, requires = "body_file")]
    pub(super) path: Option<String>,
    /// The framed request body for --path (the file h2load's `-d` takes): one message makes a
    /// unary call, more a client stream.
    #[arg(long, requires = "path")]
    pub(super) body_file: Option<std::path::PathBuf>,
}

impl RawArgs {
    /// The path and the messages to send, when --path is given.
    pub(super) fn read(&self) -> anyhow::Result<Option<(String, Vec<Bytes>)>> {
        match (&self.path, &self.body_file) {
            (Some(path), Some(file)) => Ok(Some((path.clone(), read_body(file)?))),
            _ => Ok(None),
        }
    }
}

/// Messages as bytes, both ways.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct RawCodec;

impl Codec for RawCodec {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = Self;
    type Decoder = Self;

    fn encoder(&mut self) -> Self {
        Self
    }

    fn decoder(&mut self) -> Self {
        Self
    }
}

impl Encoder for RawCodec {
    type Item = Bytes;
    type Error = Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(&item);
        Ok(())
    }

    fn buffer_settings(&self) -> BufferSettings {
        BufferSettings::default()
    }
}

impl Decoder for RawCodec {
    type Item = Bytes;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

/// The messages of a framed body; fails on a cut or a compressed message.
pub(super) fn split(body: &[u8]) -> anyhow::Result<Vec<Bytes>> {
    let mut messages = Vec::new();
    let mut rest = body;
    while !rest.is_empty() {
        anyhow::ensure!(rest.len() >= 5, "the body ends inside a message prefix");
        anyhow::ensure!(rest[0] == 0, "compressed messages are not supported");
        let len = u32::from_be_bytes([rest[1], rest[2], rest[3], rest[4]]) as usize;
        anyhow::ensure!(rest.len() - 5 >= len, "the body ends inside a message");
        messages.push(Bytes::copy_from_slice(&rest[5..5 + len]));
        rest = &rest[5 + len..];
    }
    anyhow::ensure!(!messages.is_empty(), "the body holds no message");
    Ok(messages)
}

/// Reads a framed body from `path`.
pub(super) fn read_body(path: &std::path::Path) -> anyhow::Result<Vec<Bytes>> {
    let body = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    split(&body).with_context(|| format!("{} is not a framed gRPC body", path.display()))
}

/// One caller of one path on one connection.
#[derive(Debug, Clone)]
pub(super) struct Caller {
    grpc: tonic::client::Grpc<Channel>,
    path: PathAndQuery,
    messages: Arc<[Bytes]>,
}

impl Caller {
    /// A caller of `path` sending `messages` on `channel`.
    pub(super) fn new(channel: Channel, path: &str, messages: Vec<Bytes>) -> anyhow::Result<Self> {
        let path = PathAndQuery::try_from(path).with_context(|| format!("{path} is not a gRPC path"))?;
        Ok(Self { grpc: tonic::client::Grpc::new(channel), path, messages: messages.into() })
    }

    /// One call; the answer's single message as bytes.
    pub(super) async fn call_bytes(&mut self) -> Result<Response<Bytes>, Status> {
        self.grpc.ready().await.map_err(|e| Status::unavailable(format!("the connection is not ready: {e}")))?;
        if let [message] = &*self.messages {
            self.grpc.unary(Request::new(message.clone()), self.path.clone(), RawCodec).await
        } else {
            let stream = futures_util::stream::iter(self.messages.to_vec());
            self.grpc.client_streaming(Request::new(stream), self.path.clone(), RawCodec).await
        }
    }

    /// One call whose answer must be a `Commands` (every SkyWalking report service answers one).
    pub(super) async fn call(&mut self) -> Result<Response<skyconf_proto::v3::Commands>, Status> {
        let answer = self.call_bytes().await?;
        let (metadata, bytes, extensions) = answer.into_parts();
        let commands = <skyconf_proto::v3::Commands as prost::Message>::decode(bytes)
            .map_err(|e| Status::internal(format!("the answer is not a Commands message: {e}")))?;
        Ok(Response::from_parts(metadata, commands, extensions))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_reads_framed_messages_and_refuses_cuts() {
        let body = [0, 0, 0, 0, 2, 7, 8, 0, 0, 0, 0, 0];
        assert_eq!(split(&body).unwrap(), vec![Bytes::from_static(&[7, 8]), Bytes::new()]);
        assert!(split(&body[..6]).is_err());
        assert!(split(&body[..3]).is_err());
        assert!(split(&[]).is_err());
    }
}
