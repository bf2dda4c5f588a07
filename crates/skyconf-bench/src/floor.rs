//! `skyconf-bench floor`: a measurement-only CDS server on an HTTP/2 path of its own, to find
//! the memory floor an agent connection would cost without hyper's and h2's per-connection
//! buffers. Not a server to run agents on: it answers `fetchConfigurations` only, trusts its
//! client (no header is decoded, flow control is not enforced, no hardening), and exists so that
//! `scripts/bench/held.sh` (`SERVER=floor`) can measure it beside `skyconf serve`.
//!
//! What it keeps per connection is only what a connection must: the socket, the stream ids of
//! the calls in progress and each held call's request, in one task. Bytes are read into, and
//! answers written from, one buffer per worker thread while a read or a write is in progress;
//! a connection keeps bytes of its own only while a frame is split across reads or a write
//! would block. The answers are `skyconf_server::CdsService`'s, so every agent gets the exact
//! bytes `skyconf serve` sends, and a poll whose answer is unchanged is held (25 s, or until the
//! served document changes), as `skyconf serve` holds it.
//!
//! HTTP/2 as far as the Java agent's calls need it: the preface, SETTINGS (the server's says
//! `SETTINGS_HEADER_TABLE_SIZE` 0, so a header block can be skipped without decoding it), PING,
//! HEADERS/CONTINUATION, DATA, RST_STREAM, GOAWAY, WINDOW_UPDATE; answers use HPACK's static
//! table and literals only. `/metrics` on --admin-addr says `skyconf_held_polls`, and
//! `/readyz` answers 200, as `skyconf serve`'s admin port does for the bench.

use std::cell::RefCell;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use prost::Message as _;
use skyconf_proto::v3::ConfigurationSyncRequest;
use skyconf_server::{CdsOptions, CdsService, ServedTable};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

use super::runtime;

/// Arguments of `skyconf-bench floor`.
#[derive(Debug, Clone, clap::Args)]
pub(super) struct Args {
    /// The agents' address.
    #[arg(long, default_value = "127.0.0.1:11800")]
    addr: SocketAddr,
    /// `/metrics` and `/readyz`.
    #[arg(long)]
    admin_addr: SocketAddr,
    /// The document served, read again whenever its modification time changes.
    #[arg(long)]
    file: PathBuf,
    /// Answers every poll at once instead of holding unchanged ones.
    #[arg(long)]
    no_hold: bool,
    /// Worker threads (default: the CPUs it may run on).
    #[arg(long)]
    threads: Option<usize>,
}

/// How long an unchanged poll is held: well within the Java agent's 30 s deadline (a load
/// generator with 19,000 agents on a busy core is seconds late to read an answer, and a
/// hold's length changes nothing of what a held call keeps).
const HOLD: Duration = Duration::from_secs(20);

/// The client connection preface.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// What every connection shares.
struct Shared {
    cds: CdsService,
    served: Arc<ServedTable>,
    hold: bool,
    held: AtomicU64,
}

pub(super) fn run(args: Args) -> anyhow::Result<ExitCode> {
    runtime(args.threads)?.block_on(serve(args))?;
    Ok(ExitCode::SUCCESS)
}

async fn serve(args: Args) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(&args.file).with_context(|| format!("cannot read {}", args.file.display()))?;
    let served = Arc::new(ServedTable::new(skyconf_core::read(&text).context("the document is refused")?));
    let cds = CdsService::new(Arc::clone(&served), CdsOptions::default());
    let shared = Arc::new(Shared { cds, served, hold: !args.no_hold, held: AtomicU64::new(0) });
    tokio::spawn(watch_file(args.file, Arc::clone(&shared)));
    tokio::spawn(admin(TcpListener::bind(args.admin_addr).await?, Arc::clone(&shared)));
    let listener = TcpListener::bind(args.addr).await?;
    loop {
        let (socket, _) = listener.accept().await?;
        let _ = socket.set_nodelay(true);
        tokio::spawn(Connection::new(socket, Arc::clone(&shared)).run());
    }
}

/// Installs the document again whenever its modification time changes.
async fn watch_file(path: PathBuf, shared: Arc<Shared>) {
    let modified = |p: &PathBuf| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let mut last = modified(&path);
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = modified(&path);
        if now == last {
            continue;
        }
        last = now;
        if let Some(table) = std::fs::read_to_string(&path).ok().and_then(|t| skyconf_core::read(&t).ok()) {
            shared.served.install(table);
        }
    }
}

/// `/metrics` (the held polls) and anything else (200, for `/readyz`), one request per connection.
async fn admin(listener: TcpListener, shared: Arc<Shared>) {
    while let Ok((mut socket, _)) = listener.accept().await {
        let shared = Arc::clone(&shared);
        tokio::spawn(async move {
            // One read: the bench's GET fits in it, and what it asks for is not needed.
            let mut request = [0u8; 1024];
            if socket.read(&mut request).await.unwrap_or(0) == 0 {
                return;
            }
            let body = format!("skyconf_held_polls {}\n", shared.held.load(Ordering::Relaxed));
            let answer = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = socket.write_all(answer.as_bytes()).await;
        });
    }
}

thread_local! {
    /// The worker's buffer for reads and for the answers being written.
    static SCRATCH: RefCell<(Vec<u8>, Vec<u8>)> = RefCell::new((vec![0; 64 * 1024], Vec::with_capacity(64 * 1024)));
}

/// A call whose request has not ended yet.
struct Open {
    id: u32,
    body: Vec<u8>,
}

/// A held call.
struct Held {
    id: u32,
    request: ConfigurationSyncRequest,
    until: Instant,
}

/// One agent connection.
struct Connection {
    socket: TcpStream,
    shared: Arc<Shared>,
    /// Preface bytes still to come.
    preface: usize,
    /// A frame split across reads (empty otherwise).
    partial: Vec<u8>,
    /// Bytes a write left behind (empty otherwise).
    unsent: Vec<u8>,
    open: Vec<Open>,
    held: Vec<Held>,
    closing: bool,
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.shared.held.fetch_sub(self.held.len() as u64, Ordering::Relaxed);
    }
}

impl Connection {
    fn new(socket: TcpStream, shared: Arc<Shared>) -> Self {
        Self {
            socket,
            shared,
            preface: PREFACE.len(),
            partial: Vec::new(),
            unsent: Vec::new(),
            open: Vec::new(),
            held: Vec::new(),
            closing: false,
        }
    }

    async fn run(mut self) {
        let mut changes = self.shared.served.subscribe_answers();
        // The server's SETTINGS: no HPACK table, 100 streams.
        let mut settings = Vec::new();
        frame(&mut settings, 4, 0, 0, &[0, 1, 0, 0, 0, 0, 0, 3, 0, 0, 0, 100]);
        self.unsent = settings;
        loop {
            if !self.unsent.is_empty() && !self.flush_unsent() {
                return;
            }
            if self.closing && self.unsent.is_empty() {
                return;
            }
            let until = self.held.iter().map(|h| h.until).min();
            tokio::select! {
                ready = self.socket.readable() => {
                    if ready.is_err() || !self.read() {
                        return;
                    }
                }
                ready = self.socket.writable(), if !self.unsent.is_empty() => {
                    if ready.is_err() {
                        return;
                    }
                }
                changed = changes.changed(), if !self.held.is_empty() => {
                    if changed.is_err() {
                        return;
                    }
                    self.answer_held(false);
                }
                () = tokio::time::sleep_until(until.unwrap_or_else(Instant::now)), if until.is_some() => {
                    self.answer_held(true);
                }
            }
        }
    }

    /// Reads what is there and answers it; `false`: the connection is done.
    fn read(&mut self) -> bool {
        SCRATCH.with(|scratch| {
            let mut scratch = scratch.borrow_mut();
            let (buf, out) = &mut *scratch;
            out.clear();
            let n = match self.socket.try_read(buf) {
                Ok(0) => return false,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return true,
                Err(_) => return false,
            };
            if self.partial.is_empty() {
                let used = self.frames(&buf[..n], out);
                self.partial.extend_from_slice(&buf[used..n]);
            } else {
                let mut bytes = std::mem::take(&mut self.partial);
                bytes.extend_from_slice(&buf[..n]);
                let used = self.frames(&bytes, out);
                bytes.drain(..used);
                if !bytes.is_empty() {
                    self.partial = bytes;
                }
            }
            if self.partial.is_empty() {
                self.partial = Vec::new();
            }
            self.send(out)
        })
    }

    /// Writes `out` (after anything left unsent); keeps what the socket did not take.
    fn send(&mut self, out: &[u8]) -> bool {
        if !self.unsent.is_empty() {
            self.unsent.extend_from_slice(out);
            return true;
        }
        let mut written = 0;
        while written < out.len() {
            match self.socket.try_write(&out[written..]) {
                Ok(n) => written += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(_) => return false,
            }
        }
        self.unsent.extend_from_slice(&out[written..]);
        true
    }

    fn flush_unsent(&mut self) -> bool {
        let unsent = std::mem::take(&mut self.unsent);
        let ok = self.send(&unsent);
        if self.unsent.is_empty() {
            self.unsent = Vec::new();
        }
        ok
    }

    /// Handles the whole frames at the start of `bytes`, answers into `out`; the bytes used.
    fn frames(&mut self, bytes: &[u8], out: &mut Vec<u8>) -> usize {
        let mut at = 0;
        if self.preface > 0 {
            let n = self.preface.min(bytes.len());
            self.preface -= n;
            at = n;
        }
        while bytes.len() - at >= 9 {
            let head = &bytes[at..at + 9];
            let len = (usize::from(head[0]) << 16) | (usize::from(head[1]) << 8) | usize::from(head[2]);
            if bytes.len() - at < 9 + len {
                break;
            }
            let (kind, flags) = (head[3], head[4]);
            let id = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
            let payload = &bytes[at + 9..at + 9 + len];
            at += 9 + len;
            match kind {
                // DATA: the request's message; its bytes given back to the connection's window.
                0 => {
                    let data = unpadded(flags, payload);
                    if let Some(open) = self.open.iter_mut().find(|o| o.id == id) {
                        open.body.extend_from_slice(data);
                    }
                    if len > 0 {
                        frame(out, 8, 0, 0, &(len as u32).to_be_bytes());
                    }
                    if flags & 1 != 0 {
                        self.ended(id, out);
                    }
                }
                // HEADERS: a new call (its header block is not needed).
                1 => {
                    self.open.push(Open { id, body: Vec::new() });
                    if flags & 1 != 0 {
                        self.ended(id, out);
                    }
                }
                // RST_STREAM: the client gave up on the call.
                3 => {
                    self.open.retain(|o| o.id != id);
                    let before = self.held.len();
                    self.held.retain(|h| h.id != id);
                    self.shared.held.fetch_sub((before - self.held.len()) as u64, Ordering::Relaxed);
                }
                // SETTINGS: acknowledged.
                4 if flags & 1 == 0 => frame(out, 4, 1, 0, &[]),
                // PING: answered.
                6 if flags & 1 == 0 => frame(out, 6, 1, 0, payload),
                // GOAWAY: no new calls; the connection ends once its answers are out.
                7 => self.closing = true,
                _ => {}
            }
        }
        at
    }

    /// The request of call `id` ended: answered, or held.
    fn ended(&mut self, id: u32, out: &mut Vec<u8>) {
        let Some(i) = self.open.iter().position(|o| o.id == id) else { return };
        let open = self.open.swap_remove(i);
        let request = open.body.get(5..).and_then(|m| ConfigurationSyncRequest::decode(m).ok()).unwrap_or_default();
        let answer = self.shared.cds.answer(&request);
        if answer.is_empty() && self.shared.hold {
            self.held.push(Held { id, request, until: Instant::now() + HOLD });
            self.shared.held.fetch_add(1, Ordering::Relaxed);
            return;
        }
        respond(out, id, &answer);
    }

    /// Answers the held calls whose answer changed (or all, unchanged, whose hold ended when
    /// `expired`).
    fn answer_held(&mut self, expired: bool) {
        let now = Instant::now();
        let shared = Arc::clone(&self.shared);
        SCRATCH.with(|scratch| {
            let mut scratch = scratch.borrow_mut();
            let out = &mut scratch.1;
            out.clear();
            self.held.retain(|held| {
                let answer = if expired && held.until <= now { Some(bytes::Bytes::new()) } else { None };
                let answer = answer.or_else(|| Some(shared.cds.answer(&held.request)).filter(|a| !a.is_empty()));
                match answer {
                    Some(answer) => {
                        respond(out, held.id, &answer);
                        shared.held.fetch_sub(1, Ordering::Relaxed);
                        false
                    }
                    None => true,
                }
            });
            if self.held.is_empty() {
                self.held = Vec::new();
            }
            let _ = self.send(out);
        });
    }
}

/// DATA's payload without its padding.
fn unpadded(flags: u8, payload: &[u8]) -> &[u8] {
    if flags & 0x8 == 0 {
        return payload;
    }
    let Some((&pad, rest)) = payload.split_first() else { return payload };
    &rest[..rest.len().saturating_sub(usize::from(pad))]
}

/// Appends one frame.
fn frame(out: &mut Vec<u8>, kind: u8, flags: u8, id: u32, payload: &[u8]) {
    let len = payload.len() as u32;
    out.extend_from_slice(&len.to_be_bytes()[1..]);
    out.extend_from_slice(&[kind, flags]);
    out.extend_from_slice(&id.to_be_bytes());
    out.extend_from_slice(payload);
}

/// Appends a whole gRPC answer: headers, the message, trailers with grpc-status 0.
fn respond(out: &mut Vec<u8>, id: u32, message: &[u8]) {
    // :status 200 (static index 8); content-type (static name 31), literal, not indexed.
    let mut headers = vec![0x88, 0x0f, 0x10, 16];
    headers.extend_from_slice(b"application/grpc");
    frame(out, 1, 0x4, id, &headers);
    let mut data = Vec::with_capacity(5 + message.len());
    data.push(0);
    data.extend_from_slice(&(message.len() as u32).to_be_bytes());
    data.extend_from_slice(message);
    frame(out, 0, 0, id, &data);
    let mut trailers = vec![0x00, 11];
    trailers.extend_from_slice(b"grpc-status");
    trailers.extend_from_slice(&[1, b'0']);
    frame(out, 1, 0x5, id, &trailers);
}
