//! The application: wires the parts into a running server. Everything that starts a task or
//! opens a port is here, once, and so is what joins the parts: the slots each agent connection
//! carries ([`agent_slots`]), each component's metric handles registered into the one registry,
//! and the gateway handed each forwarded call's connection (`crate::forwarded`). The socket
//! layer, the gateway and `metrics/` know none of the components; which top-level modules still
//! import each other, `scripts/module-cycles.py` lists.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use skyconf_sources::{DynSource, Source};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::shared_history::SharedHistory;
use crate::startup::initial_state;
use crate::{
    CdsService, Fleet, FleetOptions, LastGood, Metrics, Persister, ReleaseLog, Reloader, Running, ServeConfig,
    ServedTable, ServerError, StoreTask, StoreView, admin, dcs, fleet, metrics, rollout, security,
};

/// How long a connection with answers still on their way (a forwarded stream in gateway mode,
/// held polls being answered, frames the peer has not taken) may take to end after shutdown
/// begins, before it is closed. A connection with nothing left to answer has
/// [`security::drain::SHUTDOWN_GRACE`] (see [`security::drain`] for the whole sequence).
pub(crate) const SHUTDOWN_DRAIN: Duration = Duration::from_secs(10);

/// How long start-up waits to read the shared release history before serving without it.
const HISTORY_IMPORT_LIMIT: Duration = Duration::from_secs(5);

/// Loads the configuration from `source` (or the persisted copy), then opens the ports and
/// serves until shut down, applying every change the source reports.
pub async fn start_with<S: Source>(source: S, config: ServeConfig) -> Result<Running, ServerError> {
    let store_name = source.describe();
    // Certificates and keys are checked before anything else: no port opens with half its security.
    let grpc_tls = config.security.grpc_tls.as_ref().map(security::tls::grpc_config).transpose()?;
    let admin_tls = config.security.admin_tls.as_ref().map(|f| security::tls::server_config(f, "admin")).transpose()?;
    let opamp_tls = config.security.opamp_tls.as_ref().map(|f| security::tls::server_config(f, "OpAMP")).transpose()?;
    let upstreams = match &config.gateway {
        Some(gateway) => {
            let client_tls = gateway.tls.as_ref().map(security::tls::upstream_client_config).transpose()?;
            Some(Arc::new(skyconf_gateway::Upstreams::new(gateway, client_tls)?))
        }
        None => None,
    };
    let last_good = config.data_dir.as_deref().map(LastGood::in_dir);
    let start = initial_state(&source, &config, last_good.as_ref()).await?;
    let (connected, stale) = (start.connected(), start.stale());
    let (served, accepted) = match start.table() {
        Some((table, text)) => (ServedTable::new(table.clone()), text.map(str::to_owned)),
        None => (ServedTable::waiting(), None),
    };
    let (content, rejection, failure) = start.into_parts();
    let served = Arc::new(served);
    let persister = Persister::spawn();
    let releases = Arc::new(open_releases(&config, &persister));
    // Replicas on a store with revisions and records share one history (see shared_history):
    // what they recorded while this one was away comes first.
    let history = source
        .shared_records()
        .filter(|_| source.revisions())
        .map(|records| SharedHistory::new(records, Arc::clone(&releases)));
    let shared_up_to = match &history {
        Some(history) if connected => tokio::time::timeout(HISTORY_IMPORT_LIMIT, history.import()).await.unwrap_or(0),
        _ => 0,
    };
    if served.snapshot().ready() {
        let snapshot = served.snapshot();
        // The store's revision, when the table was read from the store just now (not from the
        // last good configuration on disk while the store is away).
        let revision = (connected && accepted.as_deref() == content.agent_configurations())
            .then(|| content.revision(skyconf_core::store::AGENT_CONFIGURATIONS_KEY));
        releases.record_start(&snapshot.table, accepted.as_deref(), snapshot.version, revision.flatten(), &store_name);
        if let Some(revision) = revision {
            served.set_store_revision(snapshot.version, revision);
        }
    }
    if let Some(rejection) = rejection {
        served.record_rejection(rejection);
    }
    let store = Arc::new(StoreView::new(store_name.clone(), content, connected, stale).with_reach(source.reach()));
    if let Some(failure) = failure {
        store.mark_failed(failure);
    }
    let mut metrics = Metrics::for_server(Arc::clone(&served), Arc::clone(&store));
    let cds_metrics = crate::cds::metrics::CdsMetrics::default();
    cds_metrics.register(metrics.registry_mut());
    let edge_metrics = security::metrics::EdgeMetrics::default();
    edge_metrics.register(metrics.registry_mut());
    if let Some(upstreams) = &upstreams {
        skyconf_gateway::metrics::register(upstreams, metrics.registry_mut());
    }
    let opamp_gauge = crate::opamp::metrics::OpampGauge::default();
    metrics.registry_mut().register_collector(Box::new(opamp_gauge.clone()));
    let metrics = Arc::new(metrics);
    if let Some(rejection) = served.last_rejection() {
        // Counted here; start-up logged it.
        metrics.events().for_origin(&rejection.origin).rejected_at_start();
    }

    let shutdown = CancellationToken::new();
    let mut tasks = JoinSet::new();

    let grpc_listener = bind(config.grpc_addr).await?;
    let admin_listener = bind(config.admin_addr).await?;
    let grpc_addr = grpc_listener.local_addr().map_err(|cause| ServerError::Bind { addr: config.grpc_addr, cause })?;
    let admin_addr =
        admin_listener.local_addr().map_err(|cause| ServerError::Bind { addr: config.admin_addr, cause })?;
    if config.security.admin_tokens.is_empty() && !admin_addr.ip().is_loopback() {
        // The default (0.0.0.0, no tokens) suits a first try and a pod behind a network policy;
        // anywhere else it lets every host that can reach the port roll the fleet back.
        tracing::warn!(
            %admin_addr,
            "No admin token is set: anyone who can reach this address can change what every agent is served. Set --admin-write-token (or a token file), or bind --admin-addr to 127.0.0.1."
        );
    }

    let (updates_tx, updates_rx) = mpsc::channel(64);
    let source = Arc::new(source);
    let replicas =
        Arc::new(fleet::replicas::Replicas::new(config.replicas.clone(), source.shared_records(), admin_addr));
    let opamp_records = source.shared_records();
    let (watched, keys, stop) = (Arc::clone(&source), config.keys.clone(), shutdown.clone());
    tasks.spawn(async move {
        watched.run(keys, updates_tx, stop).await;
        Ok(())
    });
    // The writes the admin API and the rollout driver announce, read back by the reloader.
    let pending = Arc::new(crate::publish::PendingWrites::default());
    let reloader = Reloader::new(Arc::clone(&served), store_name, accepted.as_deref())
        .with_releases(Arc::clone(&releases))
        .with_pending(Arc::clone(&pending))
        .with_events(&metrics.events())
        .with_guard(config.reset_guard);
    let last_good = last_good.map(|copy| (copy, persister.clone()));
    let mut store_task = StoreTask::new(Arc::clone(&store), reloader, last_good).with_events(metrics.events());
    let held_control = store_task.held_control();
    tasks.spawn(async move {
        store_task.run(updates_rx).await;
        Ok(())
    });
    if let Some(history) = history {
        let (installs, stop) = (served.subscribe(), shutdown.clone());
        tasks.spawn(async move {
            history.run(shared_up_to, installs, stop).await;
            Ok(())
        });
    }

    if let Some(upstreams) = &upstreams {
        upstreams.spawn(&mut tasks, &shutdown);
    }
    // In gateway mode every agent's management calls pass here: a poller without one is anonymous.
    let fleet_options =
        FleetOptions { expect_identity: config.fleet.expect_identity || upstreams.is_some(), ..config.fleet };
    let fleet = Arc::new(Fleet::new(fleet_options));
    metrics.fleet().count(&fleet, &served);
    tasks.spawn(sweep_fleet(Arc::clone(&fleet), shutdown.clone()));
    let publishing = Arc::clone(&replicas).run(Arc::clone(&fleet), Arc::clone(&served), shutdown.clone());
    tasks.spawn(async move {
        publishing.await;
        Ok(())
    });
    let cds = CdsService::new(Arc::clone(&served), config.cds)
        .with_fleet(Arc::clone(&fleet))
        .with_metrics(cds_metrics.clone())
        .with_holding(hold_options(&config), shutdown.clone());
    let held_polls = cds.held();
    cds_metrics.watch_held(&held_polls);
    let cds = cds.into_server();
    // In gateway mode the OAP answers ManagementService (the gateway reads it in passing).
    let management = upstreams.is_none().then(|| crate::management::Management::new(Arc::clone(&fleet)).into_server());
    let dcs = dcs::DcsService::new(Arc::clone(&store)).with_metrics(metrics.dcs()).into_server();
    // Each service is added either as it is or behind its token check (no cost when off).
    use security::auth::guard;
    let (agent_token, dcs_token, events) =
        (config.security.agent_token.as_ref(), config.security.dcs_token.as_ref(), metrics.events());
    // CDS is called straight from the port, before the routes (`agent_port::Direct`): one type
    // whether or not it is guarded.
    let cds = match security::auth::guard_either(cds, agent_token, metrics::GuardedService::Cds, &events) {
        tower::util::Either::Left(cds) => tower::util::Either::Left(cds),
        tower::util::Either::Right(guarded) => {
            tower::util::Either::Right(tower::ServiceExt::<http::Request<tonic::body::Body>>::map_response(
                guarded,
                |answer: http::Response<tonic::service::interceptor::ResponseBody<tonic::body::Body>>| {
                    answer.map(tonic::body::Body::new)
                },
            ))
        }
    };
    let (management, management_guarded) = match management {
        Some(management) => guard(management, agent_token, metrics::GuardedService::Management, &events),
        None => (None, None),
    };
    let (dcs, dcs_guarded) = guard(dcs, dcs_token, metrics::GuardedService::Dcs, &events);
    let limits = config.security.grpc_limits;
    let connections = config.security.connections;
    let cap = connections.grpc_cap();
    let sources = security::sources::Sources::new(connections.grpc_share(cap));
    tracing::info!(
        connections = sources.max_connections(),
        held_polls = config.hold.source_share(),
        pending_calls = limits.pending_share(),
        "Each source address may hold at most these shares of the gRPC port's bounds."
    );
    let drain = security::drain::Drain::new(SHUTDOWN_DRAIN);
    edge_metrics.clone().watch_connections(&drain);
    let grpc_acceptor = security::connections::Acceptor::new(grpc_listener, cap, "gRPC")
        .with_sources(sources, edge_metrics.clone())
        .with_drain(drain.clone())
        .with_slots(agent_slots(upstreams.is_some()));
    let first_message = limits.layer(upstreams.is_some(), &edge_metrics, &drain);
    let http2 = crate::agent_port::http2::server(&limits);
    let mut routes = tonic::service::Routes::builder();
    add_some(&mut routes, management);
    add_some(&mut routes, management_guarded);
    add_some(&mut routes, dcs);
    add_some(&mut routes, dcs_guarded);
    let mut routes = routes.routes();
    if let Some(upstreams) = &upstreams {
        let forwarder = crate::forwarded::Forwarding::new(Arc::clone(upstreams), Arc::clone(&fleet));
        let router = routes.into_axum_router().fallback(move |request: axum::extract::Request| {
            let forwarder = forwarder.clone();
            async move { forwarder.forward(request).await }
        });
        routes = tonic::service::Routes::from(router);
        let upstreams = upstreams.members().iter().map(|m| m.addr.as_str()).collect::<Vec<_>>().join(",");
        tracing::info!(%upstreams, "Gateway mode: configuration discovery is answered here, every other call is forwarded to the OAPs.");
    }
    let stop = shutdown.clone();
    tasks.spawn(async move {
        let routes = tower::Layer::layer(&first_message, routes.prepare());
        let direct = crate::agent_port::Direct {
            name: <crate::cds::CdsServer as tonic::server::NamedService>::NAME,
            service: tower::Layer::layer(&first_message, cds),
        };
        // TLS is terminated here, not by hyper: the preface deadline then counts bytes above TLS.
        let timeout = connections.handshake_timeout;
        // The connections see the shutdown begin before they are asked to finish.
        let signal = {
            let (stop, drain) = (stop.clone(), drain.clone());
            async move {
                stop.cancelled().await;
                drain.begin();
            }
        };
        let serving = async {
            match grpc_tls {
                Some(tls) => {
                    let incoming = limits.incoming_tls(grpc_acceptor, tls, timeout);
                    crate::agent_port::serve(incoming, routes, Some(direct), http2, signal).await;
                }
                None => {
                    let incoming = limits.incoming(grpc_acceptor, timeout);
                    crate::agent_port::serve(incoming, routes, Some(direct), http2, signal).await;
                }
            }
        };
        // The port waits for every connection to end, and each one ends within its bound
        // (security::drain); this guards against one that is never polled again.
        let backstop = async {
            stop.cancelled().await;
            tokio::time::sleep(SHUTDOWN_DRAIN + security::drain::SHUTDOWN_GRACE).await;
            tracing::warn!(drain = ?SHUTDOWN_DRAIN, "Connections were still open after the shutdown drain; leaving them.");
        };
        tokio::select! {
            () = serving => {}
            () = backstop => {}
        }
        // The last connections closed drain their sockets (security::drain::linger).
        drain.closed(security::drain::DRAIN_MAX + Duration::from_millis(100)).await;
        if drain.cut() > 0 {
            tracing::info!(
                cut = drain.cut(),
                grace = ?security::drain::SHUTDOWN_GRACE,
                "Closed the connections still open after the grace with nothing left to answer (peers that did not acknowledge the shutdown), or at the drain; their sockets were drained first."
            );
        }
        Ok(())
    });

    // Rollouts resume before the admin port opens: a restart mid-rollout serves its waves at once.
    let keeper = rollout::Rollouts::keeper(source.shared_records(), config.data_dir.as_deref());
    // Records in a store that is away cannot be read now; the driver reads the record on each
    // tick, so it resumes once the store answers (whose outage start-up logged, once).
    let resume = connected || !matches!(keeper, rollout::Keeper::Records(_));
    let rollouts = rollout::Rollouts::new(Arc::clone(&served), Arc::clone(&fleet), keeper, replicas.id().to_owned())
        .with_replicas(Arc::clone(&replicas))
        .with_events(metrics.events());
    let rollouts = Arc::new(rollouts);
    if resume {
        rollouts.resume().await;
    }
    let mut admin = admin::Admin::new(Arc::clone(&served), Arc::clone(&store));
    if let Some(upstreams) = &upstreams {
        admin = admin.with_gateway(Arc::clone(upstreams));
    }
    let mut admin = admin
        .with_held_polls(held_polls)
        .with_releases(Arc::clone(&releases))
        .with_fleet(Arc::clone(&fleet))
        .with_replicas(Arc::clone(&replicas))
        .with_writer(source as Arc<dyn DynSource>)
        .with_held_control(held_control)
        .with_pending(pending)
        .with_rollouts(Arc::clone(&rollouts))
        .with_options(config.admin);
    let opamp = match config.opamp_addr {
        Some(addr) => {
            let security = crate::opamp::PortSecurity {
                token: config.security.agent_token.clone(),
                tls: opamp_tls,
                handshake_timeout: connections.handshake_timeout,
            };
            Some(crate::opamp::start(addr, &served, security, &mut tasks, &shutdown).await?)
        }
        None => None,
    };
    if let Some(port) = &opamp {
        admin = admin.with_opamp(Arc::clone(&port.fleet));
        opamp_gauge.count(&port.fleet, &port.opamp);
    }
    // Every replica reads the others' OpAMP agents; those with the port publish theirs.
    let opamp_peers = Arc::new(crate::opamp::replicas::OpampReplicas::new(
        replicas.id(),
        opamp_records,
        config.replicas.publish_every,
    ));
    rollouts.judge_opamp(opamp.as_ref().map(|port| Arc::clone(&port.fleet)), Arc::clone(&opamp_peers));
    admin = admin.with_opamp_peers(Arc::clone(&opamp_peers));
    let publishing =
        opamp_peers.run(opamp.as_ref().map(|port| Arc::clone(&port.fleet)), Arc::clone(&served), shutdown.clone());
    tasks.spawn(async move {
        publishing.await;
        Ok(())
    });
    let (driven, stop) = (admin.publisher().clone(), shutdown.clone());
    tasks.spawn(async move {
        rollouts.run(driven, stop).await;
        Ok(())
    });
    let admin = crate::admin::admin_app(&admin, &metrics, &config.security, config.admin.max_document_bytes);
    let page = page_url(admin_addr, admin_tls.is_some());
    let stop = shutdown.clone();
    tasks.spawn(async move {
        let serving =
            security::serve_admin(admin_listener, admin, admin_tls, connections, stop.clone().cancelled_owned());
        // Admin requests still open SHUTDOWN_GRACE after the shutdown began are not waited for.
        let grace = async {
            stop.cancelled().await;
            tokio::time::sleep(security::drain::SHUTDOWN_GRACE).await;
        };
        tokio::select! {
            served = serving => served.map_err(ServerError::Admin),
            () = grace => Ok(()),
        }
    });

    tracing::info!(%grpc_addr, %admin_addr, %page, "Serving configuration discovery.");
    let opamp_addr = opamp.map(|port| port.addr);
    Ok(Running {
        grpc_addr,
        admin_addr,
        served,
        store,
        releases,
        fleet,
        replicas,
        metrics,
        opamp_addr,
        persister,
        shutdown,
        tasks,
    })
}

/// The web page's URL on the admin port, to open from this machine: a wildcard listen address
/// (`0.0.0.0`, `[::]`) is reached through loopback.
fn page_url(admin_addr: SocketAddr, tls: bool) -> String {
    let mut addr = admin_addr;
    if addr.ip().is_unspecified() {
        addr.set_ip(if addr.is_ipv4() { Ipv4Addr::LOCALHOST.into() } else { Ipv6Addr::LOCALHOST.into() });
    }
    format!("{}://{addr}/", if tls { "https" } else { "http" })
}

/// The slots of an agent connection's state besides the edge's own, one per component that keeps
/// something per connection: its fleet link (closed with the connection), its held polls and, in
/// gateway mode, the OAP its forwarded calls are pinned to.
pub fn agent_slots(gateway: bool) -> crate::socket::SlotMakers {
    let slots =
        crate::socket::SlotMakers::default().with(|_| crate::cds::hold::HeldPolls::default()).with(fleet::Link::new);
    if gateway { slots.with(|_| skyconf_gateway::Pin::default()) } else { slots }
}

/// The release log in the data directory, or in memory without one (or when it cannot be read).
fn open_releases(config: &ServeConfig, persister: &Persister) -> ReleaseLog {
    let Some(dir) = &config.data_dir else {
        tracing::info!("No data directory: the release history is kept in memory and lost on restart.");
        return ReleaseLog::in_memory(config.release_retention);
    };
    ReleaseLog::open_with(dir, config.release_retention, persister.clone()).unwrap_or_else(|error| {
        tracing::error!(%error, "Cannot read the release history; keeping releases in memory.");
        ReleaseLog::in_memory(config.release_retention)
    })
}

/// Forgets rows of open connections that stopped polling their service, until `stop`.
async fn sweep_fleet(fleet: Arc<Fleet>, stop: CancellationToken) -> Result<(), ServerError> {
    let period = (fleet.options().expire_after / 4).clamp(Duration::from_secs(1), Duration::from_secs(60));
    let mut tick = tokio::time::interval(period);
    loop {
        tokio::select! {
            () = stop.cancelled() => return Ok(()),
            _ = tick.tick() => {
                let forgotten = fleet.sweep();
                if forgotten > 0 {
                    tracing::debug!(forgotten, tracked = fleet.tracked(), "Forgot fleet rows not polled lately.");
                }
            }
        }
    }
}

/// The hold settings, with the per-connection bound below half the connection's stream limit:
/// held polls must never take every stream a connection has.
fn hold_options(config: &ServeConfig) -> crate::HoldOptions {
    let streams = config.security.grpc_limits.max_concurrent_streams as usize;
    let per_connection = config.hold.max_held_per_connection.min(streams.saturating_sub(1) / 2).max(1);
    crate::HoldOptions { max_held_per_connection: per_connection, ..config.hold }
}

/// Adds `service` to `routes` when there is one.
fn add_some<S>(routes: &mut tonic::service::RoutesBuilder, service: Option<S>)
where
    S: tower::Service<http::Request<tonic::body::Body>, Error = std::convert::Infallible>
        + tonic::server::NamedService
        + Clone
        + Send
        + Sync
        + 'static,
    S::Response: axum::response::IntoResponse,
    S::Future: Send + 'static,
{
    if let Some(service) = service {
        routes.add_service(service);
    }
}

async fn bind(addr: SocketAddr) -> Result<TcpListener, ServerError> {
    TcpListener::bind(addr).await.map_err(|cause| ServerError::Bind { addr, cause })
}
