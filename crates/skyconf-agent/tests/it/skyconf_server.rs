//! The agent against skyconf's own CDS service, in-process on an ephemeral port: the scenarios of
//! `common::scenarios` over real gRPC, then the spawned loop with the real transport.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::common::scenarios::{self, Backend, SERVICE, V1, V2};
use skyconf_agent::watchers::{SPAN_LIMIT_PER_SEGMENT, SpanLimit};
use skyconf_agent::{Agent, AgentOptions, GrpcTransport, Registry};
use skyconf_server::{CdsOptions, CdsService, ServedTable};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// skyconf's CDS service over a table the test installs directly.
struct InProcess {
    served: Arc<ServedTable>,
    addr: SocketAddr,
    running: Option<(oneshot::Sender<()>, JoinHandle<()>)>,
}

impl InProcess {
    async fn new() -> Self {
        let served = Arc::new(ServedTable::new(skyconf_core::read("configurations:\n").unwrap()));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut me = Self { served, addr, running: None };
        me.serve_on(listener);
        me
    }

    fn serve_on(&mut self, listener: TcpListener) {
        let (stop, stopped) = oneshot::channel::<()>();
        let service = CdsService::new(Arc::clone(&self.served), CdsOptions::default()).into_server();
        let join = tokio::spawn(async move {
            let incoming = tonic::transport::server::TcpIncoming::from(listener);
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming_shutdown(incoming, async {
                    let _ = stopped.await;
                })
                .await
                .unwrap();
        });
        self.running = Some((stop, join));
    }
}

impl Backend for InProcess {
    async fn serve(&mut self, yaml: &str) {
        self.served.install(skyconf_core::read(yaml).unwrap());
    }

    async fn stop(&mut self) {
        let (stop, join) = self.running.take().expect("running");
        let _ = stop.send(());
        join.await.unwrap();
    }

    async fn start(&mut self) {
        // The same port: the agent's channel reconnects to it by itself.
        let listener = TcpListener::bind(self.addr).await.unwrap();
        self.serve_on(listener);
    }

    fn addr(&self) -> SocketAddr {
        self.addr
    }
}

#[tokio::test]
async fn every_scenario_against_skyconf() {
    let mut backend = InProcess::new().await;
    scenarios::run_all(&mut backend).await;
    backend.stop().await;
}

#[tokio::test]
async fn the_spawned_loop_follows_skyconf() {
    let mut backend = InProcess::new().await;
    backend.serve(V1).await;
    let registry = Registry::new();
    let limit = Arc::new(SpanLimit::default());
    registry.register(limit.clone());
    let transport = GrpcTransport::lazy(&backend.addr().to_string()).unwrap();
    let options = AgentOptions::new(SERVICE).interval(Duration::from_millis(20));
    let handle = Agent::new(options, registry, transport).spawn();
    let mut status = handle.status();

    let v1 = scenarios::digest(V1, SERVICE);
    status.wait_for(|s| s.uuid.as_deref() == Some(v1.as_str())).await.unwrap();
    assert_eq!(limit.limit(), 400);

    backend.serve(V2).await;
    let v2 = scenarios::digest(V2, SERVICE);
    let applied =
        tokio::time::timeout(Duration::from_secs(10), status.wait_for(|s| s.uuid.as_deref() == Some(v2.as_str())))
            .await
            .expect("the change arrives within a few polls")
            .unwrap()
            .clone();
    assert_eq!(limit.limit(), 500);
    assert_eq!(applied.failures_in_a_row, 0);
    assert!(SPAN_LIMIT_PER_SEGMENT.starts_with("agent."));
    handle.stop().await;
    backend.stop().await;
}
