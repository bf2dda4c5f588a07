//! Shutdown over real sockets, many times over: every held poll is answered "unchanged" and that
//! answer reaches its client whole, however busy the client is, and the server stops within a
//! second whatever is open.
//!
//! The clients are raw HTTP/2 (the `h2` crate), so that a connection reset is seen as what it
//! is: an error on every call whose answer had not been read (a Java agent reports it as
//! `UNAVAILABLE` and drops its channel). Some of them read as a busy host does (a small receive
//! buffer, a little at a time) and send a WINDOW_UPDATE after every read, as C-core's flow control
//! does: the server's answers then wait in its send queue while the client keeps sending, which is
//! when closing a socket with unread input (a reset) loses them.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};

use bytes::Bytes;
use skyconf_proto::v3::ConfigurationSyncRequest;
use skyconf_server::security::{GrpcLimits, SecurityConfig};
use skyconf_server::{HoldOptions, Running, ServeConfig};
use skyconf_sources::file::FileSource;
use skyconf_testkit::fixtures::{V5_DOCUMENT, temp_file};
use skyconf_testkit::server::{Server, eventually, loopback};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpSocket, TcpStream};

use crate::grpc_frame;

/// The bound of every wait for something that must happen.
const BOUND: Duration = Duration::from_secs(10);

/// How long a stop may take with every poll held.
const STOP_WITHIN: Duration = Duration::from_secs(1);

const PATH: &str = "/skywalking.v3.ConfigurationDiscoveryService/fetchConfigurations";

/// Which agent a poll is timed as.
#[derive(Debug, Clone, Copy)]
enum Agent {
    /// The Java agent: a 30 s deadline.
    Java,
    /// The Go agent: no deadline, grpc-go's own user agent.
    Go,
}

fn request(addr: SocketAddr, agent: Agent) -> http::Request<()> {
    let request = http::Request::post(format!("http://{addr}{PATH}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    let request = match agent {
        Agent::Java => request.header("grpc-timeout", "30S").header("user-agent", "grpc-java-netty/1.68.1"),
        Agent::Go => request.header("user-agent", "grpc-go/1.71.0"),
    };
    request.body(()).unwrap()
}

/// How a call ended: its `grpc-status` and the bytes of its answer, or the error that ended it.
async fn outcome(response: h2::client::ResponseFuture) -> Result<(String, usize), String> {
    let response = response.await.map_err(|e| e.to_string())?;
    if let Some(status) = response.headers().get("grpc-status") {
        return Ok((status.to_str().unwrap().to_owned(), 0));
    }
    let mut body = response.into_body();
    let mut bytes = 0;
    while let Some(chunk) = body.data().await {
        let chunk = chunk.map_err(|e| e.to_string())?;
        bytes += chunk.len();
        let _ = body.flow_control().release_capacity(chunk.len());
    }
    let trailers = body.trailers().await.map_err(|e| e.to_string())?.ok_or("no trailers")?;
    Ok((trailers.get("grpc-status").ok_or("no grpc-status")?.to_str().unwrap().to_owned(), bytes))
}

/// The outcomes of an agent connection's calls, once they end.
type Calls = Vec<tokio::task::JoinHandle<Result<(String, usize), String>>>;

/// One agent connection holding `polls` polls of `agent`; busy ones read as [`BusySocket`] says.
/// The connection (kept open while the client is kept, as an agent keeps its channel) and its
/// calls.
async fn hold_polls(
    addr: SocketAddr,
    digest: &str,
    polls: usize,
    agent: Agent,
    busy: bool,
) -> (h2::client::SendRequest<Bytes>, Calls) {
    let socket = TcpSocket::new_v4().unwrap();
    if busy {
        socket.set_recv_buffer_size(4096).unwrap();
    }
    let tcp = socket.connect(addr).await.unwrap();
    let (client, connection) = h2::client::handshake(BusySocket::new(tcp, busy)).await.unwrap();
    tokio::spawn(connection);
    let message = grpc_frame(&ConfigurationSyncRequest { service: "svc".into(), uuid: digest.into() });
    let mut calls = Vec::new();
    for _ in 0..polls {
        let mut ready = client.clone().ready().await.unwrap();
        let (response, mut send) = ready.send_request(request(addr, agent), false).unwrap();
        send.send_data(message.clone(), true).unwrap();
        calls.push(tokio::spawn(outcome(response)));
    }
    (client, calls)
}

fn held_now(running: &Running) -> usize {
    crate::metrics::now(running, "skyconf_held_polls") as usize
}

/// 20 shutdowns, each with 240 held polls on 6 connections (Java and Go agents, four of the
/// connections busy): every poll ends OK with the "unchanged" answer (an empty message), none
/// with a reset, and every stop takes under a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_held_poll_gets_its_unchanged_answer_through_shutdown_20_times() {
    let mut stops = Vec::new();
    for run in 0..20 {
        let (_dir, path) = temp_file("agent.yaml", V5_DOCUMENT);
        let server = Server::start(FileSource::new(path), loopback()).await;
        let (addr, digest) = (server.grpc_addr, server.served.snapshot().answer("svc").digest.as_str().to_owned());
        let (mut clients, mut calls) = (Vec::new(), Vec::new());
        for (agent, busy) in
            [(Agent::Java, true), (Agent::Java, true), (Agent::Go, true), (Agent::Java, true), (Agent::Java, false)]
                .into_iter()
                .chain([(Agent::Go, false)])
        {
            let (client, held) = hold_polls(addr, &digest, 40, agent, busy).await;
            clients.push(client);
            calls.extend(held);
        }
        eventually("every poll held", || held_now(&server) == calls.len()).await;

        let began = Instant::now();
        tokio::time::timeout(BOUND, server.stop()).await.expect("the server stops").unwrap();
        stops.push(began.elapsed());

        let mut failed = Vec::new();
        for call in calls {
            match tokio::time::timeout(BOUND, call).await.expect("every call ends").unwrap() {
                // The empty message: gRPC's 5-byte frame header and nothing after it.
                Ok((status, 5)) if status == "0" => {}
                other => failed.push(other),
            }
        }
        assert!(
            failed.is_empty(),
            "run {run}: {} of 240 polls lost their answer: {:?}",
            failed.len(),
            &failed[..3.min(failed.len())]
        );
    }
    let slowest = stops.iter().max().unwrap();
    eprintln!("20 shutdowns with 240 held polls each: slowest stop {slowest:?}, all {stops:?}");
    assert!(*slowest < STOP_WITHIN, "{stops:?}");
}

/// 20,000 held polls answered at once at shutdown take longer to write than the grace: no
/// connection is cut while its answers are still being written, and every poll ends OK
/// "unchanged".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_thousand_held_polls_answered_at_shutdown_all_arrive() {
    let (_dir, path) = temp_file("agent.yaml", V5_DOCUMENT);
    let grpc_limits = GrpcLimits { max_concurrent_streams: 256, ..GrpcLimits::default() };
    let hold = HoldOptions { max_held_per_connection: 100, ..HoldOptions::default() };
    let security = SecurityConfig { grpc_limits, ..SecurityConfig::default() };
    let server = Server::start(FileSource::new(path), ServeConfig { security, hold, ..loopback() }).await;
    let (addr, digest) = (server.grpc_addr, server.served.snapshot().answer("svc").digest.as_str().to_owned());
    let (mut clients, mut calls) = (Vec::new(), Vec::new());
    for _ in 0..200 {
        let (client, held) = hold_polls(addr, &digest, 100, Agent::Java, false).await;
        clients.push(client);
        calls.extend(held);
    }
    eventually("every poll held", || held_now(&server) == calls.len()).await;
    let began = Instant::now();
    tokio::time::timeout(BOUND, server.stop()).await.expect("the server stops").unwrap();
    eprintln!("stop with 20,000 held polls: {:?}", began.elapsed());
    let mut failed = std::collections::BTreeMap::new();
    for call in calls {
        let ended = tokio::time::timeout(BOUND, call).await.expect("every call ends").unwrap();
        if ended != Ok(("0".to_owned(), 5)) {
            *failed.entry(format!("{ended:?}")).or_insert(0) += 1;
        }
    }
    assert!(failed.is_empty(), "polls that lost their answer: {failed:?}");
    drop(clients);
}

/// A stop takes under a second whatever is open: a held poll (answered "unchanged"), a peer that
/// went silent after its preface (it never acknowledges the GOAWAY: cut), a call whose message
/// never comes (answered `DEADLINE_EXCEEDED`), an admin request whose body never ends, and idle
/// connections on both ports.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_takes_under_a_second_whatever_is_open() {
    use tokio::io::AsyncWriteExt;
    let (_dir, path) = temp_file("agent.yaml", V5_DOCUMENT);
    let server = Server::start(FileSource::new(path), loopback()).await;
    let (addr, digest) = (server.grpc_addr, server.served.snapshot().answer("svc").digest.as_str().to_owned());
    let (_agent, held) = hold_polls(addr, &digest, 1, Agent::Java, false).await;

    // Silent after its preface and SETTINGS: reads nothing more, answers nothing.
    let mut silent = TcpStream::connect(addr).await.unwrap();
    silent.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0").await.unwrap();
    // HEADERS without END_STREAM, and never a DATA frame.
    let (client, connection) = h2::client::handshake(TcpStream::connect(addr).await.unwrap()).await.unwrap();
    tokio::spawn(connection);
    let mut ready = client.ready().await.unwrap();
    let (waiting, _body) = ready.send_request(request(addr, Agent::Java), false).unwrap();
    // An admin upload that stops halfway, and an idle keep-alive connection on each port.
    let mut upload = TcpStream::connect(server.admin_addr).await.unwrap();
    let head = format!(
        "PUT /api/v1/services/svc?dry_run=true HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{{",
        server.admin_addr
    );
    upload.write_all(head.as_bytes()).await.unwrap();
    let _idle_admin = TcpStream::connect(server.admin_addr).await.unwrap();
    let (idle_agent, _) = hold_polls(addr, &digest, 0, Agent::Java, false).await;
    eventually("the poll held", || held_now(&server) == 1).await;
    // The client sends its call with its preface, before the server has even accepted the
    // connection: a stop before that resets the connection with the listener (the module docs
    // of `agent_port`), which is not the case this test is about.
    eventually("the call waiting for its message", || {
        crate::metrics::now(&server, "skyconf_grpc_pending_streams") == 1
    })
    .await;

    let began = Instant::now();
    tokio::time::timeout(BOUND, server.stop()).await.expect("the server stops").unwrap();
    let took = began.elapsed();
    eprintln!("stop with a held poll, a silent peer, a waiting call and a stalled upload: {took:?}");
    assert!(took < STOP_WITHIN, "{took:?}");
    for call in held {
        assert_eq!(call.await.unwrap(), Ok(("0".to_owned(), 5)), "the held poll answered \"unchanged\"");
    }
    let waiting = tokio::time::timeout(BOUND, outcome(waiting)).await.expect("the waiting call ends");
    assert_eq!(waiting, Ok(("4".to_owned(), 0)), "answered DEADLINE_EXCEEDED at shutdown, not left open");
    drop((silent, upload, idle_agent));
}

/// An agent's socket on a busy host (see the module docs): with `busy`, a 4 KiB receive buffer
/// read 512 bytes at a time with a millisecond between reads, and a WINDOW_UPDATE (connection,
/// +1) sent at the next frame boundary after every read. Otherwise a plain socket.
struct BusySocket {
    tcp: TcpStream,
    busy: bool,
    pause: Option<Pin<Box<tokio::time::Sleep>>>,
    owed: bool,
    /// Bytes of an inserted frame not written yet.
    inserting: Vec<u8>,
    /// Where the client's own frames are.
    frames: skyconf_server::socket::Frames,
}

impl BusySocket {
    fn new(tcp: TcpStream, busy: bool) -> Self {
        Self {
            tcp,
            busy,
            pause: None,
            owed: false,
            inserting: Vec::new(),
            frames: skyconf_server::socket::Frames::default(),
        }
    }

    /// Writes the owed WINDOW_UPDATE, if any, when between two frames.
    fn poll_insert(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.owed && self.inserting.is_empty() && self.frames.at_boundary() {
            self.owed = false;
            // length 4, type WINDOW_UPDATE, no flags, stream 0; increment 1.
            self.inserting = vec![0, 0, 4, 8, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        }
        while !self.inserting.is_empty() {
            let n = ready!(Pin::new(&mut self.tcp).poll_write(cx, &self.inserting))?;
            self.inserting.drain(..n);
        }
        Poll::Ready(Ok(()))
    }
}

impl AsyncRead for BusySocket {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if !this.busy {
            return Pin::new(&mut this.tcp).poll_read(cx, buf);
        }
        if let Some(pause) = &mut this.pause {
            ready!(pause.as_mut().poll(cx));
            this.pause = None;
        }
        let mut chunk = [0; 512];
        let mut small = ReadBuf::new(&mut chunk[..buf.remaining().min(512)]);
        ready!(Pin::new(&mut this.tcp).poll_read(cx, &mut small))?;
        let n = small.filled().len();
        buf.put_slice(small.filled());
        if n > 0 {
            this.owed = true;
            this.pause = Some(Box::pin(tokio::time::sleep(Duration::from_millis(1))));
        }
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for BusySocket {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        ready!(self.poll_insert(cx))?;
        let n = ready!(Pin::new(&mut self.tcp).poll_write(cx, buf))?;
        self.frames.pass(&buf[..n]);
        Poll::Ready(Ok(n))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_insert(cx))?;
        Pin::new(&mut self.tcp).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_shutdown(cx)
    }
}
