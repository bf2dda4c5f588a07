//! The gRPC port's sockets: TCP streams that tell h2 they take no vectored writes.
//!
//! h2 copies a DATA frame into its write buffer only when the payload is small: up to 256 bytes
//! when the socket takes vectored writes, up to 1 KiB when it does not. A larger payload is
//! *chained* instead, and h2 buffers nothing more until that frame is written, so every such
//! answer costs its own `writev` call. A changed CDS answer (six settings, the 128-character
//! digest, the serial number) is a few hundred bytes, so reporting no vectored writes lets h2
//! batch changed answers as it batches unchanged ones (BENCHMARKS.md has the syscall counts);
//! larger answers are still chained.
//!
//! Each connection also carries an [`AgentConnection`] into its calls' extensions: the peer
//! address (fleet status keys on it) and, in gateway mode, the OAP its forwarded calls are pinned
//! to. [`peer_of`] reads it, with or without TLS.

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll};

use std::net::SocketAddr;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use tonic::transport::server::{Connected, TcpConnectInfo, TlsConnectInfo};

use crate::gateway::upstream::Pin as UpstreamPin;

/// What every call on one agent connection shares: its peer, and its state.
#[derive(Debug, Clone)]
pub struct AgentConnection {
    /// The TCP peer.
    pub tcp: TcpConnectInfo,
    /// Shared by the connection's calls; dropped when the connection closes and its last call
    /// ends.
    pub state: Arc<ConnectionState>,
}

/// The state of one agent connection.
#[derive(Debug, Default)]
pub struct ConnectionState {
    /// The OAP the connection's forwarded calls go to (gateway mode).
    pub pin: UpstreamPin,
    /// Its polls held now (see `crate::cds::hold`).
    pub held_polls: std::sync::atomic::AtomicUsize,
}

impl AgentConnection {
    /// The peer's address.
    pub fn remote_addr(&self) -> Option<SocketAddr> {
        self.tcp.remote_addr()
    }
}

/// The connection a call came on, from the request's extensions (plaintext or TLS).
pub fn connection_of(extensions: &http::Extensions) -> Option<&AgentConnection> {
    extensions
        .get::<AgentConnection>()
        .or_else(|| extensions.get::<TlsConnectInfo<AgentConnection>>().map(TlsConnectInfo::get_ref))
}

/// The peer address of the connection a call came on.
pub fn peer_of(extensions: &http::Extensions) -> Option<SocketAddr> {
    connection_of(extensions)?.remote_addr()
}

/// A [`TcpStream`] that reports no vectored writes (see the module docs).
#[derive(Debug)]
pub struct BatchedWrites(TcpStream);

impl BatchedWrites {
    /// Wraps an accepted stream.
    pub fn new(stream: TcpStream) -> Self {
        Self(stream)
    }
}

impl Connected for BatchedWrites {
    type ConnectInfo = AgentConnection;

    fn connect_info(&self) -> Self::ConnectInfo {
        AgentConnection { tcp: self.0.connect_info(), state: Arc::default() }
    }
}

impl AsyncRead for BatchedWrites {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for BatchedWrites {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        // Still correct if a caller asks anyway.
        Pin::new(&mut self.0).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        false
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn reports_no_vectored_writes_and_keeps_the_peer_address_and_the_bytes() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        let (accepted, _) = listener.accept().await.unwrap();
        assert!(accepted.is_write_vectored(), "tokio's TcpStream takes vectored writes: the reason for the wrapper");

        let mut server = BatchedWrites::new(accepted);
        assert!(!server.is_write_vectored(), "h2 must see no vectored writes, to copy answers up to 1 KiB");
        assert_eq!(server.connect_info().remote_addr(), Some(client.local_addr().unwrap()), "fleet status keys on it");

        server.write_all(b"answer").await.unwrap();
        let written = server.write_vectored(&[IoSlice::new(b" and"), IoSlice::new(b" more")]).await.unwrap();
        assert!(written > 0);
        server.flush().await.unwrap();
        client.write_all(b"request").await.unwrap();
        let mut request = [0; 7];
        server.read_exact(&mut request).await.unwrap();
        assert_eq!(&request, b"request");
        let mut answer = vec![0; 6 + written];
        client.read_exact(&mut answer).await.unwrap();
        assert!(answer.starts_with(b"answer and"), "{answer:?}");
    }
}
