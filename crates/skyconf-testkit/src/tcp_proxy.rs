//! A loopback TCP proxy that can fall silent: a network partition between a client and a server
//! that leaves both ends' sockets open.
//!
//! [`TcpProxy::silence`] stops forwarding in both directions without closing, resetting or
//! reading either side: bytes (requests, HTTP/2 PINGs, a FIN) stay in the kernel's buffers, as
//! they would behind a cable pulled out, and a connection accepted meanwhile waits to be
//! forwarded. So each end learns of the partition only from its own timers (a deadline, an
//! unanswered PING). [`TcpProxy::heal`] forwards again whatever waited, in order, so each end then
//! sees what the other did meanwhile (a close, a GOAWAY).
//!
//! Each link is two copying tasks, one per direction; a direction that reads end of stream shuts
//! down the other side's writing half (a FIN goes through), and an error on either side ends the
//! link (both sockets close). Dropping the proxy closes every link.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;

/// A running proxy from an ephemeral loopback port to one upstream address.
#[derive(Debug)]
pub struct TcpProxy {
    addr: SocketAddr,
    silent: watch::Sender<bool>,
    /// The accept loop and every link, ended when the proxy is dropped.
    tasks: Arc<Mutex<JoinSet<()>>>,
}

impl TcpProxy {
    /// Starts forwarding connections to `upstream`.
    pub async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a loopback port");
        let addr = listener.local_addr().expect("a bound address");
        let (silent, _) = watch::channel(false);
        let tasks = Arc::new(Mutex::new(JoinSet::new()));
        let (links, quiet) = (Arc::clone(&tasks), silent.subscribe());
        tasks.lock().unwrap().spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                let quiet = quiet.clone();
                links.lock().unwrap().spawn(link(inbound, upstream, quiet));
            }
        });
        Self { addr, silent, tasks }
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops forwarding, both ways, on every link; nothing is closed.
    pub fn silence(&self) {
        self.silent.send_replace(true);
    }

    /// Forwards again, starting with what waited.
    pub fn heal(&self) {
        self.silent.send_replace(false);
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.tasks.lock().unwrap_or_else(|p| p.into_inner()).abort_all();
    }
}

/// Waits until the proxy forwards.
async fn forwarding(quiet: &mut watch::Receiver<bool>) -> bool {
    quiet.wait_for(|silent| !silent).await.is_ok()
}

/// One client connection: connects upstream once the proxy forwards, then copies both ways
/// until both directions ended or one failed.
async fn link(inbound: TcpStream, upstream: SocketAddr, mut quiet: watch::Receiver<bool>) {
    if !forwarding(&mut quiet).await {
        return;
    }
    let Ok(outbound) = TcpStream::connect(upstream).await else { return };
    let _ = inbound.set_nodelay(true);
    let _ = outbound.set_nodelay(true);
    let (in_read, in_write) = inbound.into_split();
    let (out_read, out_write) = outbound.into_split();
    let mut directions = JoinSet::new();
    directions.spawn(copy(in_read, out_write, quiet.clone()));
    directions.spawn(copy(out_read, in_write, quiet));
    while let Some(ended) = directions.join_next().await {
        // An error ends the link: dropping the other direction closes both sockets.
        if !matches!(ended, Ok(true)) {
            directions.abort_all();
        }
    }
}

/// Copies `from` to `to` while the proxy forwards; true when `from` ended cleanly (its FIN was
/// passed on), false on an error.
async fn copy(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, mut quiet: watch::Receiver<bool>) -> bool {
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        if !forwarding(&mut quiet).await {
            return false;
        }
        // Reading stops as soon as the proxy falls silent (a TCP read is cancel-safe: nothing
        // read is lost), so what arrives meanwhile stays in the kernel's buffers.
        let read = tokio::select! {
            read = from.read(&mut buffer) => read,
            _ = quiet.wait_for(|silent| *silent) => continue,
        };
        match read {
            Ok(0) => return to.shutdown().await.is_ok(),
            Ok(n) => {
                if to.write_all(&buffer[..n]).await.is_err() {
                    return false;
                }
            }
            Err(_) => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// An echo server on loopback.
    async fn echo() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = socket.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        addr
    }

    async fn round_trip(client: &mut TcpStream, text: &[u8]) -> Vec<u8> {
        client.write_all(text).await.unwrap();
        let mut got = vec![0u8; text.len()];
        client.read_exact(&mut got).await.unwrap();
        got
    }

    /// `client` sent `sent` through the silent `proxy`: nothing comes back (and the connection
    /// stays open) until the proxy is healed, and then the echo of `sent` does.
    async fn answered_once_healed(proxy: &TcpProxy, client: &mut TcpStream, sent: &[u8]) {
        let mut byte = [0u8; 1];
        let waited = tokio::time::timeout(Duration::from_millis(300), client.read(&mut byte)).await;
        assert!(waited.is_err(), "nothing comes back, and the connection is not closed: {waited:?}");
        proxy.heal();
        let mut got = vec![0u8; sent.len()];
        tokio::time::timeout(Duration::from_secs(5), client.read_exact(&mut got)).await.unwrap().unwrap();
        assert_eq!(got, sent);
    }

    #[tokio::test]
    async fn a_silent_proxy_forwards_nothing_closes_nothing_and_delivers_everything_once_healed() {
        let proxy = TcpProxy::start(echo().await).await;
        let mut client = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(round_trip(&mut client, b"before").await, b"before");

        proxy.silence();
        client.write_all(b"during").await.unwrap();
        answered_once_healed(&proxy, &mut client, b"during").await;
    }

    #[tokio::test]
    async fn a_connection_accepted_while_silent_is_forwarded_once_healed() {
        let proxy = TcpProxy::start(echo().await).await;
        proxy.silence();
        let mut client = TcpStream::connect(proxy.addr()).await.unwrap();
        client.write_all(b"hello").await.unwrap();
        answered_once_healed(&proxy, &mut client, b"hello").await;
    }

    #[tokio::test]
    async fn a_close_goes_through() {
        let proxy = TcpProxy::start(echo().await).await;
        let mut client = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(round_trip(&mut client, b"x").await, b"x");
        client.shutdown().await.unwrap();
        let mut rest = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(5), client.read_to_end(&mut rest)).await;
        assert!(matches!(read, Ok(Ok(0))), "the echo server's FIN comes back: {read:?}");
    }
}
