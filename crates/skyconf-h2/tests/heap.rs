//! Heap bytes per idle connection and per held call, from a counting global allocator: what the
//! server side of N real TCP connections adds (the accepted socket's registration, the task, the
//! connection state), the clients on a thread of their own that allocates nothing per
//! connection. Prints the figures; fails if they grow several times past today's.

mod common;

use std::convert::Infallible;
use std::io::{Read, Write};

use bytes::Bytes;
use common::raw::{PREFACE, frame, headers, settings, settings_ack};
use http::{Request, Response};
use skyconf_h2::{RecvBody, ServiceFn, Settings};
use skyconf_heapcount::{Counting, in_use};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const CONNECTIONS: usize = 200;

/// Reads frames until a PING ACK: everything sent before the PING has been handled.
fn sync(socket: &mut std::net::TcpStream) {
    socket.write_all(&frame(6, 0, 0, b"synchron")).unwrap();
    let mut head = [0u8; 9];
    loop {
        socket.read_exact(&mut head).unwrap();
        let len = (usize::from(head[0]) << 16) | (usize::from(head[1]) << 8) | usize::from(head[2]);
        let mut payload = [0u8; 64];
        socket.read_exact(&mut payload[..len]).unwrap();
        if head[3] == 6 && head[4] & 1 == 1 {
            return;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn heap_per_idle_connection_and_per_held_call() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (socket, _) = listener.accept().await.unwrap();
            socket.set_nodelay(true).unwrap();
            tokio::spawn(async move {
                let service = ServiceFn(|request: Request<RecvBody>| async move {
                    if request.uri().path() == "/hold" {
                        std::future::pending::<()>().await;
                    }
                    Ok::<_, Infallible>(Response::new(http_body_util::Empty::<Bytes>::new()))
                });
                let settings = Settings { keepalive_interval: None, ..Settings::default() };
                let _ = skyconf_h2::serve_connection(
                    socket,
                    service,
                    std::sync::Arc::new(settings),
                    std::future::pending(),
                )
                .await;
            });
        }
    });
    let open = move |n: usize| {
        (0..n)
            .map(|_| {
                let mut socket = std::net::TcpStream::connect(addr).unwrap();
                socket.set_nodelay(true).unwrap();
                let mut hello = PREFACE.to_vec();
                hello.extend(settings(&[]));
                hello.extend(settings_ack());
                socket.write_all(&hello).unwrap();
                sync(&mut socket);
                socket
            })
            .collect::<Vec<_>>()
    };
    // One connection first: the worker's buffers and the runtime's first slab pages.
    let warm = tokio::task::spawn_blocking(move || open(1)).await.unwrap();
    let before = in_use();
    let mut sockets = tokio::task::spawn_blocking(move || open(CONNECTIONS)).await.unwrap();
    let idle = in_use();
    let sockets = tokio::task::spawn_blocking(move || {
        for socket in &mut sockets {
            socket.write_all(&headers(1, "/hold", true)).unwrap();
            sync(socket);
        }
        sockets
    })
    .await
    .unwrap();
    let held = in_use();
    let per_idle = (idle - before) / CONNECTIONS as isize;
    let per_held = (held - idle) / CONNECTIONS as isize;
    let (connection, stream) = skyconf_h2::state_sizes::<
        ServiceFn<
            fn(Request<RecvBody>) -> std::future::Ready<Result<Response<http_body_util::Empty<Bytes>>, Infallible>>,
        >,
    >();
    eprintln!(
        "heap per idle connection: {per_idle} B; per held call: {per_held} B; size_of connection state {connection} B, stream {stream} B"
    );
    assert!(per_idle < 4096, "{per_idle} B per idle connection");
    assert!(per_held < 4096, "{per_held} B per held call");
    drop((warm, sockets));
}
