//! `skyconf serve`: loads the agent configurations from a store, serves them to agents over gRPC
//! (and the whole store to OAPs over DCS) and keeps them current as the store changes. Stops
//! gracefully on SIGTERM or Ctrl-C.
//!
//! Settings come from defaults, then `--config` (a `skyconf.yaml` or an OAP `application.yml`),
//! then `SKYCONF_*` environment variables and flags; see `crate::settings`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, bail};
use skyconf_server::HoldOptions;
use skyconf_server::cds::hold::NoDeadline;
use skyconf_server::gateway::{GatewayConfig, UpstreamTls};
use skyconf_server::security::{AdminTokens, AllowedHosts, ClientAuth, Role, Secret, SecurityConfig};
use skyconf_server::{AdminOptions, CdsOptions, FleetOptions, ServeConfig};
use skyconf_sources::file::FileSettings;
use skyconf_sources::{DynSource, KeySet, Limits, StoreConfig as _};

use crate::settings::{
    ConfigFile, GatewaySection, HoldSection, LimitsSection, SecuritySection, SharingServerSection, SkyconfSection,
    TlsSettings, canonical_selector,
};
use crate::stores::{self, Layers};

/// Arguments of `skyconf serve`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Logs go to stderr; nothing is printed on stdout.

Exit status:
  0  stopped by SIGTERM or Ctrl-C
  1  cannot start: settings, the store, or an address to listen on (the reason on stderr)
  2  usage error")]
pub(crate) struct Args {
    /// A config file: skyconf.yaml, or an OAP application.yml (its `configuration:` and
    /// `configuration-discovery:` sections are used as they are).
    #[arg(long, env = "SKYCONF_CONFIG")]
    config: Option<PathBuf>,
    /// The store: file, etcd, zookeeper, nacos, dcs (the OAP's `grpc`), none. Default: the config
    /// file's `configuration.selector`, or `file` when --file is given.
    #[arg(long, env = "SKYCONF_STORE")]
    store: Option<String>,
    /// The agent-configurations YAML file (`configurations: {service: {key: value}}`), or a
    /// directory holding one file per configuration key (a mounted ConfigMap).
    #[arg(long, env = "SKYCONF_FILE")]
    file: Option<PathBuf>,
    /// Where agents (and OAPs, for DCS) connect [default: 0.0.0.0:11800].
    #[arg(long, env = "SKYCONF_GRPC_ADDR")]
    grpc_addr: Option<SocketAddr>,
    /// Where health checks and operators connect [default: 0.0.0.0:12800].
    #[arg(long, env = "SKYCONF_ADMIN_ADDR")]
    admin_addr: Option<SocketAddr>,
    /// Serve OpAMP (OpenTelemetry agents; plain HTTP and WebSocket on /v1/opamp) here, from the
    /// document's `opamp:` section [default: off; the spec's port is 4320].
    #[arg(long, env = "SKYCONF_OPAMP_ADDR")]
    opamp_addr: Option<SocketAddr>,
    /// Always send the whole configuration, even to agents that hold it (the OAP's `disableMessageDigest`).
    #[arg(long, env = "SKYCONF_DISABLE_MESSAGE_DIGEST")]
    disable_message_digest: bool,
    /// The largest document accepted, in bytes [default: 33554432].
    #[arg(long, env = "SKYCONF_MAX_DOCUMENT_BYTES")]
    max_document_bytes: Option<u64>,
    /// Where to persist the last good configuration, served at start-up when the store is unreachable.
    #[arg(long, env = "SKYCONF_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// How many releases (accepted documents) the history keeps, in --data-dir (in memory
    /// without one) [default: 200].
    #[arg(long, env = "SKYCONF_RELEASE_RETENTION")]
    release_retention: Option<usize>,
    /// An agent still echoing another digest this many polls after a change is shown as stuck
    /// [default: 3; at least 2].
    #[arg(long, env = "SKYCONF_STUCK_AFTER_POLLS")]
    stuck_after_polls: Option<u32>,
    /// Agents not seen for this long leave the fleet status (`90s`, `10m`) [default: 10m].
    #[arg(long, env = "SKYCONF_AGENT_EXPIRY", value_parser = crate::args::parse_duration)]
    agent_expiry: Option<Duration>,
    /// A store change that would reset the fleet (no services left, or at least
    /// --reset-drop-percent of them dropped) is held this long before it is installed anyway,
    /// unless confirmed or replaced first (`90s`, `10m`; `0` turns the guard off) [default: 10m].
    #[arg(long, env = "SKYCONF_RESET_GRACE", value_parser = crate::args::parse_duration)]
    reset_grace: Option<Duration>,
    /// The share of the served services (percent, 1-100) a store change must drop to be held;
    /// `0` turns the guard off [default: 50].
    #[arg(long, env = "SKYCONF_RESET_DROP_PERCENT", value_parser = clap::value_parser!(u8).range(0..=100))]
    reset_drop_percent: Option<u8>,
    /// This replica's id among the replicas sharing the store (its fleet summary's name, shown on
    /// every replica's page) [default: the host name and a random suffix]. Letters, digits, `-`,
    /// `_` and `.`.
    #[arg(long, env = "SKYCONF_REPLICA_NAME")]
    replica_name: Option<String>,
    /// A setting of the chosen store, by its OAP name (`endpoints=http://etcd:2379`,
    /// `namespace=/skywalking`, `hostPort=zk:2181`, `serverAddr=nacos`, `host=dcs`...); repeatable.
    /// Overrides the config file, which overrides the OAP's `SW_*` variables.
    #[arg(long = "store-setting", value_name = "NAME=VALUE", value_parser = crate::stores::parse_setting)]
    store_settings: Vec<(String, String)>,
    #[command(flatten)]
    security: SecurityArgs,
    #[command(flatten)]
    gateway: GatewayArgs,
    #[command(flatten)]
    hold: HoldArgs,
}

/// Held polls: an unchanged poll waits for the next change.
#[derive(Debug, clap::Args)]
#[command(next_help_heading = "Held polls")]
struct HoldArgs {
    /// Answer every poll at once, as the OAP does (by default a poll whose answer is "unchanged"
    /// is held until the service's configuration changes, within the client's deadline).
    #[arg(long, env = "SKYCONF_NO_HOLD_POLLS")]
    no_hold_polls: bool,
    /// The shortest deadline a poll must carry to be held (`10s`) [default: 10s].
    #[arg(long, env = "SKYCONF_HOLD_MIN_DEADLINE", value_parser = crate::args::parse_duration)]
    hold_min_deadline: Option<Duration>,
    /// Which polls without a deadline are held: `never`, `go-agents` (the SkyWalking Go agent) or
    /// `all` [default: go-agents].
    #[arg(long, env = "SKYCONF_HOLD_WITHOUT_DEADLINE")]
    hold_without_deadline: Option<NoDeadline>,
    /// How long a poll is held at most, with or without a deadline [default: 30s].
    #[arg(long, env = "SKYCONF_HOLD_CAP", value_parser = crate::args::parse_duration)]
    hold_cap: Option<Duration>,
}

/// Flags over `skyconf.holdPolls`.
fn hold(args: &HoldArgs, own: &HoldSection) -> HoldOptions {
    let defaults = HoldOptions::default();
    HoldOptions {
        enabled: !args.no_hold_polls && own.enabled.unwrap_or(defaults.enabled),
        min_deadline: args
            .hold_min_deadline
            .or(own.min_deadline_secs.map(Duration::from_secs))
            .unwrap_or(defaults.min_deadline),
        without_deadline: args.hold_without_deadline.or(own.without_deadline).unwrap_or(defaults.without_deadline),
        cap: args.hold_cap.or(own.cap_secs.map(Duration::from_secs)).unwrap_or(defaults.cap),
        max_held: own.max_held.unwrap_or(defaults.max_held),
        max_held_per_connection: own.max_held_per_connection.unwrap_or(defaults.max_held_per_connection),
        max_held_per_source: own.max_held_per_source.or(defaults.max_held_per_source),
        ..defaults
    }
}

/// Gateway mode: one address for agents, the OAP cluster behind skyconf.
#[derive(Debug, clap::Args)]
#[command(next_help_heading = "Gateway mode")]
struct GatewayArgs {
    /// The OAPs to forward every call but configuration discovery to (`HOST:PORT`, repeatable or
    /// comma-separated). With it, agents need one backend address: skyconf's.
    #[arg(long = "upstream", env = "SKYCONF_UPSTREAM", value_delimiter = ',', value_name = "HOST:PORT")]
    upstreams: Vec<String>,
    /// PEM CA bundle the OAPs' certificates must chain to; turns TLS towards the OAPs on.
    #[arg(long, env = "SKYCONF_UPSTREAM_TLS_CA")]
    upstream_tls_ca: Option<PathBuf>,
    /// PEM client certificate chain skyconf presents to the OAPs.
    #[arg(long, env = "SKYCONF_UPSTREAM_TLS_CERT")]
    upstream_tls_cert: Option<PathBuf>,
    /// PEM private key of --upstream-tls-cert.
    #[arg(long, env = "SKYCONF_UPSTREAM_TLS_KEY")]
    upstream_tls_key: Option<PathBuf>,
    /// The name the OAPs' certificates are checked against [default: each upstream's host].
    #[arg(long, env = "SKYCONF_UPSTREAM_TLS_SERVER_NAME")]
    upstream_tls_server_name: Option<String>,
}

/// Flags over `skyconf.gateway`: the gateway's settings, or `None` without upstreams.
fn gateway(args: GatewayArgs, own: GatewaySection) -> anyhow::Result<Option<GatewayConfig>> {
    let upstreams: Vec<String> = if args.upstreams.is_empty() { own.upstreams } else { args.upstreams };
    let upstreams: Vec<String> = upstreams.iter().map(|u| u.trim().to_owned()).filter(|u| !u.is_empty()).collect();
    let ca = args.upstream_tls_ca.or(own.tls.ca);
    let cert = args.upstream_tls_cert.or(own.tls.cert);
    let key = args.upstream_tls_key.or(own.tls.key);
    let server_name = args.upstream_tls_server_name.or(own.tls.server_name);
    if upstreams.is_empty() {
        if ca.is_some() || cert.is_some() || key.is_some() || server_name.is_some() {
            bail!("--upstream-tls-* settings apply to gateway mode: give --upstream HOST:PORT too");
        }
        return Ok(None);
    }
    for upstream in &upstreams {
        skyconf_server::gateway::upstream::split_host_port(upstream)?;
    }
    if cert.is_some() != key.is_some() {
        bail!("a client certificate towards the OAPs needs both --upstream-tls-cert and --upstream-tls-key");
    }
    let tls = match ca {
        Some(ca) => Some(UpstreamTls { ca, cert, key, server_name }),
        None if cert.is_some() || server_name.is_some() => {
            bail!("TLS towards the OAPs needs --upstream-tls-ca (the CA their certificates chain to)")
        }
        None => None,
    };
    let mut config = GatewayConfig::new(upstreams);
    config.tls = tls;
    if let Some(n) = own.connections_per_upstream {
        config.connections_per_upstream = n.max(1);
    }
    config.max_connections_per_upstream = match own.max_connections_per_upstream {
        Some(n) if n < config.connections_per_upstream => bail!(
            "skyconf.gateway.maxConnectionsPerUpstream ({n}) is below connectionsPerUpstream ({})",
            config.connections_per_upstream
        ),
        Some(n) => n,
        None => config.max_connections_per_upstream.max(config.connections_per_upstream),
    };
    if let Some(n) = own.max_queued_calls {
        config.max_queued_calls = n;
    }
    match own.queue_wait_secs {
        Some(0) => bail!("skyconf.gateway.queueWaitSecs must be at least 1"),
        Some(secs) => config.queue_wait = std::time::Duration::from_secs(secs),
        None => {}
    }
    Ok(Some(config))
}

/// Tokens and TLS. Token values never appear in `--help` or logs; prefer the environment or
/// files to flags, which other users of the machine can see in the process list.
#[derive(Debug, clap::Args)]
struct SecurityArgs {
    /// The token agents must send as gRPC metadata `Authentication` (the OAP's
    /// `SW_AUTHENTICATION`); calls without it end with PERMISSION_DENIED, as on the OAP. OpAMP
    /// clients send it as `Authorization: Bearer <token>` (401 without it). Off when empty.
    #[arg(long, env = "SKYCONF_AGENT_TOKEN", hide_env_values = true)]
    agent_token: Option<Secret>,
    /// The token OAPs must send to skyconf's DCS service. A stock OAP sends none: setting this
    /// locks stock OAPs out.
    #[arg(long, env = "SKYCONF_DCS_SERVICE_TOKEN", hide_env_values = true)]
    dcs_service_token: Option<Secret>,
    /// An admin API bearer token that may read (repeatable; comma-separated in the environment).
    #[arg(long = "admin-read-token", env = "SKYCONF_ADMIN_READ_TOKENS", value_delimiter = ',', hide_env_values = true)]
    admin_read_tokens: Vec<Secret>,
    /// An admin API bearer token that may read and write (repeatable).
    #[arg(
        long = "admin-write-token",
        env = "SKYCONF_ADMIN_WRITE_TOKENS",
        value_delimiter = ',',
        hide_env_values = true
    )]
    admin_write_tokens: Vec<Secret>,
    /// A file of admin tokens, one `read <token>` or `write <token>` per line (repeatable).
    #[arg(long = "admin-token-file", env = "SKYCONF_ADMIN_TOKEN_FILES", value_delimiter = ',')]
    admin_token_files: Vec<PathBuf>,
    /// Serve /metrics without a token even when admin tokens are set.
    #[arg(long, env = "SKYCONF_METRICS_OPEN")]
    metrics_open: bool,
    /// A host name the admin port answers to besides IP addresses and localhost (repeatable;
    /// `*`: any). Other names are refused, against DNS rebinding.
    #[arg(long = "admin-allowed-host", env = "SKYCONF_ADMIN_ALLOWED_HOSTS", value_delimiter = ',')]
    admin_allowed_hosts: Vec<String>,
    /// PEM certificate chain for TLS on the gRPC port.
    #[arg(long, env = "SKYCONF_GRPC_TLS_CERT")]
    grpc_tls_cert: Option<PathBuf>,
    /// PEM private key of --grpc-tls-cert.
    #[arg(long, env = "SKYCONF_GRPC_TLS_KEY")]
    grpc_tls_key: Option<PathBuf>,
    /// PEM CA bundle: clients of the gRPC port must present a certificate it signed.
    #[arg(long, env = "SKYCONF_GRPC_TLS_CLIENT_CA")]
    grpc_tls_client_ca: Option<PathBuf>,
    /// `require` a client certificate (default) or only `request` one.
    #[arg(long, env = "SKYCONF_GRPC_TLS_CLIENT_AUTH")]
    grpc_tls_client_auth: Option<ClientAuth>,
    /// PEM certificate chain for TLS on the admin port.
    #[arg(long, env = "SKYCONF_ADMIN_TLS_CERT")]
    admin_tls_cert: Option<PathBuf>,
    /// PEM private key of --admin-tls-cert.
    #[arg(long, env = "SKYCONF_ADMIN_TLS_KEY")]
    admin_tls_key: Option<PathBuf>,
    /// PEM CA bundle: clients of the admin port must present a certificate it signed.
    #[arg(long, env = "SKYCONF_ADMIN_TLS_CLIENT_CA")]
    admin_tls_client_ca: Option<PathBuf>,
    /// `require` a client certificate (default) or only `request` one.
    #[arg(long, env = "SKYCONF_ADMIN_TLS_CLIENT_AUTH")]
    admin_tls_client_auth: Option<ClientAuth>,
    /// PEM certificate chain for TLS on the OpAMP port (--opamp-addr).
    #[arg(long, env = "SKYCONF_OPAMP_TLS_CERT")]
    opamp_tls_cert: Option<PathBuf>,
    /// PEM private key of --opamp-tls-cert.
    #[arg(long, env = "SKYCONF_OPAMP_TLS_KEY")]
    opamp_tls_key: Option<PathBuf>,
    /// PEM CA bundle: clients of the OpAMP port must present a certificate it signed.
    #[arg(long, env = "SKYCONF_OPAMP_TLS_CLIENT_CA")]
    opamp_tls_client_ca: Option<PathBuf>,
    /// `require` a client certificate (default) or only `request` one.
    #[arg(long, env = "SKYCONF_OPAMP_TLS_CLIENT_AUTH")]
    opamp_tls_client_auth: Option<ClientAuth>,
}

/// Flags over the config file, field by field.
fn overlay(
    settings: &mut TlsSettings,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
    client_ca: Option<PathBuf>,
    client_auth: Option<ClientAuth>,
) {
    settings.cert = cert.or(settings.cert.take());
    settings.key = key.or(settings.key.take());
    settings.client_ca = client_ca.or(settings.client_ca.take());
    settings.client_auth = client_auth.or(settings.client_auth);
}

/// Flags over `skyconf.security`, over the OAP's `receiver-sharing-server.default.authentication`.
fn security(
    args: SecurityArgs,
    mut own: SecuritySection,
    limits: &LimitsSection,
    file: Option<&ConfigFile>,
) -> anyhow::Result<SecurityConfig> {
    let sharing: SharingServerSection = match file {
        Some(f) => f.section("receiver-sharing-server.default")?.unwrap_or_default(),
        None => SharingServerSection::default(),
    };
    let non_empty = |s: Option<Secret>| s.filter(|s| !s.is_empty());
    let agent_token = non_empty(args.agent_token).or(non_empty(own.agent_token)).or(non_empty(sharing.authentication));
    let dcs_token = non_empty(args.dcs_service_token).or(non_empty(own.dcs_service_token));

    let mut admin_tokens = AdminTokens::default();
    for token in args.admin_read_tokens.into_iter().chain(own.admin.read_tokens) {
        admin_tokens.add(Role::Read, token);
    }
    for token in args.admin_write_tokens.into_iter().chain(own.admin.write_tokens) {
        admin_tokens.add(Role::Write, token);
    }
    for path in args.admin_token_files.iter().chain(&own.admin.token_files) {
        admin_tokens.add_file(path)?;
    }

    let tls = &mut own.tls;
    overlay(&mut tls.grpc, args.grpc_tls_cert, args.grpc_tls_key, args.grpc_tls_client_ca, args.grpc_tls_client_auth);
    overlay(
        &mut tls.admin,
        args.admin_tls_cert,
        args.admin_tls_key,
        args.admin_tls_client_ca,
        args.admin_tls_client_auth,
    );
    overlay(
        &mut tls.opamp,
        args.opamp_tls_cert,
        args.opamp_tls_key,
        args.opamp_tls_client_ca,
        args.opamp_tls_client_auth,
    );
    Ok(SecurityConfig {
        agent_token,
        dcs_token,
        admin_tokens,
        metrics_open: args.metrics_open || own.admin.metrics_open,
        grpc_tls: tls.grpc.resolve("grpc")?,
        admin_tls: tls.admin.resolve("admin")?,
        opamp_tls: tls.opamp.resolve("opamp")?,
        grpc_limits: limits.resolve(),
        connections: limits.connections(),
        allowed_hosts: AllowedHosts {
            names: args
                .admin_allowed_hosts
                .into_iter()
                .chain(own.admin.allowed_hosts)
                .map(|name| name.trim().to_ascii_lowercase())
                .filter(|name| !name.is_empty())
                .collect(),
        },
    })
}

/// Everything `serve` needs, resolved and validated.
struct Plan {
    config: ServeConfig,
    store: Box<dyn DynSource>,
}

fn plan(args: Args) -> anyhow::Result<Plan> {
    let env = |name: &str| std::env::var(name).ok();
    let file_config = args.config.as_deref().map(|path| ConfigFile::read(path, &env)).transpose()?;
    let own: SkyconfSection = match &file_config {
        Some(f) => f.section("skyconf")?.unwrap_or_default(),
        None => SkyconfSection::default(),
    };
    let selector_name = args
        .store
        .clone()
        .or_else(|| file_config.as_ref().and_then(|f| f.string("configuration.selector")))
        .or_else(|| args.file.as_ref().map(|_| "file".to_owned()))
        .context("no store chosen: give --file PATH, --store NAME, or --config FILE with a `configuration.selector`")?;
    let entry = canonical_selector(&selector_name)?;
    // `--file` names the file store's document: next to another store it would be ignored, so it
    // is refused, naming where the other store was chosen.
    if args.file.is_some() && entry.selector != FileSettings::SELECTOR {
        let chosen_by = if args.store.is_some() { "--store" } else { "the config file" };
        bail!(
            "--file applies to the file store, but {chosen_by} selects `{}`; drop --file or use --store file",
            entry.selector
        );
    }

    #[derive(serde::Deserialize, Default)]
    #[serde(rename_all = "camelCase", default)]
    struct Discovery {
        disable_message_digest: bool,
    }
    let discovery: Discovery = match &file_config {
        Some(f) => f.section("configuration-discovery.default")?.unwrap_or_default(),
        None => Discovery::default(),
    };
    let security = security(args.security, own.security.clone(), &own.limits, file_config.as_ref())?;
    let opamp_addr = args.opamp_addr.or(own.opamp.addr);
    if security.opamp_tls.is_some() && opamp_addr.is_none() {
        bail!("--opamp-tls-* settings apply to the OpAMP port: give --opamp-addr too");
    }
    let gateway = gateway(args.gateway, own.gateway.clone())?;
    let hold = hold(&args.hold, &own.hold_polls);
    let defaults = ServeConfig::default();
    let config = ServeConfig {
        grpc_addr: args.grpc_addr.or(own.grpc_addr).unwrap_or(defaults.grpc_addr),
        admin_addr: args.admin_addr.or(own.admin_addr).unwrap_or(defaults.admin_addr),
        cds: CdsOptions { disable_message_digest: args.disable_message_digest || discovery.disable_message_digest },
        hold,
        data_dir: args.data_dir.or(own.data_dir),
        keys: KeySet::oap_with(own.extra_keys),
        require_initial_load: entry.must_load_at_start,
        release_retention: args.release_retention.unwrap_or(defaults.release_retention),
        fleet: FleetOptions {
            stuck_after_polls: args.stuck_after_polls.unwrap_or(defaults.fleet.stuck_after_polls),
            expire_after: args.agent_expiry.unwrap_or(defaults.fleet.expire_after),
            ..defaults.fleet
        },
        admin: AdminOptions {
            max_document_bytes: args
                .max_document_bytes
                .or(own.max_document_bytes)
                .map_or(defaults.admin.max_document_bytes, |n| usize::try_from(n).unwrap_or(usize::MAX)),
            ..defaults.admin
        },
        security,
        reset_guard: skyconf_server::reload::Guard {
            policy: skyconf_core::guard::ResetPolicy {
                drop_percent: args
                    .reset_drop_percent
                    .or(own.reset_drop_percent)
                    .unwrap_or(defaults.reset_guard.policy.drop_percent)
                    .min(100),
                ..defaults.reset_guard.policy
            },
            grace: args
                .reset_grace
                .or(own.reset_grace_secs.map(Duration::from_secs))
                .unwrap_or(defaults.reset_guard.grace),
        },
        gateway,
        opamp_addr,
        replicas: skyconf_server::ReplicaOptions {
            name: args
                .replica_name
                .or(own.replica_name)
                .map(|name| check_replica_name(&name).map(|()| name))
                .transpose()?,
            ..defaults.replicas
        },
        ..defaults
    };
    let limits = Limits {
        max_value_bytes: args
            .max_document_bytes
            .or(own.max_document_bytes)
            .unwrap_or(Limits::default().max_value_bytes),
    };
    let mut overrides = args.store_settings;
    // `--file PATH` is the file store's `path` setting, ahead of the config file's.
    if let Some(path) = args.file {
        overrides.insert(0, ("path".to_owned(), path.to_string_lossy().into_owned()));
    }
    let layers = Layers { file: file_config.as_ref(), overrides: &overrides, env: &env };
    let store = stores::open(entry.selector, limits, &layers)?;
    Ok(Plan { config, store })
}

/// Refuses a replica name the stores cannot hold as a record name.
fn check_replica_name(name: &str) -> anyhow::Result<()> {
    skyconf_sources::shared::check_name(skyconf_server::fleet::replicas::FLEET_KIND, name)
        .map_err(|e| anyhow::anyhow!("--replica-name: {e}"))
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    super::runtime()?.block_on(async move {
        // Inside the runtime: some stores set up their (lazy) connections when opened.
        let Plan { config, store } = plan(args)?;
        serve(store, config).await
    })
}

async fn serve(source: Box<dyn DynSource>, config: ServeConfig) -> anyhow::Result<ExitCode> {
    let running = skyconf_server::start_with(source, config).await?;
    let stop = running.shutdown_token();
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("Shutting down.");
        stop.cancel();
    });
    running.wait().await?;
    Ok(ExitCode::SUCCESS)
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(s) => s,
            Err(error) => {
                tracing::warn!(%error, "Cannot listen for SIGTERM; only Ctrl-C stops the server.");
                let _ = tokio::signal::ctrl_c().await;
                return;
            }
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
