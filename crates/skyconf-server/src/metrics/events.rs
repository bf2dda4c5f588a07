//! Named events: each one writes its log line and counts itself, in one place, so the logs and
//! the metrics can never disagree (Vector's `internal_events`). Callers hold cheap, pre-resolved
//! handles ([`Events`], [`OriginEvents`]) and call one method per event.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct OriginLabels {
    pub(crate) origin: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct StoreLabels {
    pub(crate) store: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct GrpcDeniedLabels {
    pub(crate) service: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct RolloutEventLabels {
    pub(crate) kind: String,
}

/// The rollout events counted from the start, at zero (the others appear when they happen).
const ROLLOUT_KINDS: [&str; 5] = ["started", "passed", "reverted", "aborted", "completed"];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct AdminDeniedLabels {
    pub(crate) status: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct AdminRefusedLabels {
    pub(crate) reason: &'static str,
}

/// Why the admin port's browser checks ([`crate::security::browser`]) refused a request (403).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BrowserRefusal {
    /// The `Host` is not an IP literal, `localhost` or an allowed name (DNS rebinding).
    Host,
    /// A write from another site or origin (`Sec-Fetch-Site`, `Origin`).
    CrossSite,
    /// A write an HTML form could send (no JSON/YAML content type, `X-Skyconf-*` header or
    /// `Authorization`).
    Form,
}

impl BrowserRefusal {
    /// Every reason, for the series present from the start.
    const ALL: [Self; 3] = [Self::Host, Self::CrossSite, Self::Form];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Host => "host",
            Self::CrossSite => "cross_site",
            Self::Form => "form",
        }
    }
}

/// The gRPC services a token can guard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuardedService {
    /// Configuration discovery, which agents call.
    Cds,
    /// The management service (instance properties, keep-alive), which agents call on the same
    /// channel; the OAP guards it with the same token.
    Management,
    /// The dynamic configuration service, which OAPs call.
    Dcs,
}

impl GuardedService {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Cds => "cds",
            Self::Management => "management",
            Self::Dcs => "dcs",
        }
    }
}

/// Why the admin API turned a request away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdminDenial {
    /// No bearer token, or one that is not configured: 401.
    Unauthenticated,
    /// A read token on a write route: 403.
    ReadOnly,
}

/// The counters behind the events. Cheap to clone; [`Events::default`] makes counters that no
/// registry exposes (for tests and for parts built without a server).
#[derive(Debug, Clone, Default)]
pub struct Events {
    reloads: Family<OriginLabels, Counter>,
    rejected: Family<OriginLabels, Counter>,
    store_failures: Family<StoreLabels, Counter>,
    grpc_denied: Family<GrpcDeniedLabels, Counter>,
    admin_denied: Family<AdminDeniedLabels, Counter>,
    admin_refused: Family<AdminRefusedLabels, Counter>,
    rollout_events: Family<RolloutEventLabels, Counter>,
}

impl Events {
    pub(crate) fn register(&self, registry: &mut Registry) {
        registry.register(
            "skyconf_reloads",
            "Agent-configuration documents installed (a delete installs the empty table), by origin",
            self.reloads.clone(),
        );
        registry.register(
            "skyconf_documents_rejected",
            "Agent-configuration documents refused (the last good table stayed), by origin",
            self.rejected.clone(),
        );
        registry.register(
            "skyconf_store_failures",
            "Failures the configuration store reported (outages, broken watches), by store",
            self.store_failures.clone(),
        );
        registry.register(
            "skyconf_grpc_denied",
            "gRPC calls refused with PERMISSION_DENIED for a missing or wrong token, by service",
            self.grpc_denied.clone(),
        );
        registry.register(
            "skyconf_admin_denied",
            "Admin API requests refused: 401 (no or unknown token) or 403 (read token on a write)",
            self.admin_denied.clone(),
        );
        registry.register(
            "skyconf_admin_refused",
            "Admin requests refused (403) by the browser checks: an unknown Host (host), a cross-site or cross-origin write (cross_site), a write an HTML form could send (form)",
            self.admin_refused.clone(),
        );
        registry.register(
            "skyconf_rollout_events",
            "What staged rollouts did, by kind (started, wave, applied, passed, promoted, reverted, aborted, completed, ...), counted by the replica that recorded it",
            self.rollout_events.clone(),
        );
        // Present from the start, at zero: a rate over a series that appears late misses its
        // first increment.
        for kind in ROLLOUT_KINDS {
            let _ = self.rollout_events.get_or_create_owned(&RolloutEventLabels { kind: kind.to_owned() });
        }
        for service in [GuardedService::Cds, GuardedService::Management, GuardedService::Dcs] {
            let _ = self.grpc_denied.get_or_create_owned(&GrpcDeniedLabels { service: service.as_str() });
        }
        for status in ["401", "403"] {
            let _ = self.admin_denied.get_or_create_owned(&AdminDeniedLabels { status });
        }
        for reason in BrowserRefusal::ALL {
            let _ = self.admin_refused.get_or_create_owned(&AdminRefusedLabels { reason: reason.as_str() });
        }
    }

    /// The events of documents from `origin`, with their counters resolved once.
    pub fn for_origin(&self, origin: &str) -> OriginEvents {
        let labels = OriginLabels { origin: origin.to_owned() };
        OriginEvents {
            origin: labels.origin.clone(),
            reloads: self.reloads.get_or_create_owned(&labels),
            rejected: self.rejected.get_or_create_owned(&labels),
        }
    }

    /// Makes `store`'s failure counter visible (at zero) before its first failure.
    pub fn watch_store(&self, store: &str) {
        let _ = self.store_failures.get_or_create_owned(&StoreLabels { store: store.to_owned() });
    }

    /// The store failed; whatever is served stays in service. Logged once per outage, with what
    /// is served (`None`: nothing yet), unless `logged` (start-up said it already).
    pub fn store_failed(&self, store: &str, error: &str, served: Option<usize>, logged: bool) {
        self.store_failures.get_or_create(&StoreLabels { store: store.to_owned() }).inc();
        match served {
            _ if logged => {}
            Some(services) => tracing::error!(
                store,
                error,
                services,
                "The configuration store failed; still serving the last good configuration."
            ),
            None => tracing::error!(
                store,
                error,
                "The configuration store failed; nothing is served yet: agents get \"no change\" until it answers."
            ),
        }
    }

    /// A gRPC call was refused for its token. Logged at debug: a misconfigured fleet polls every
    /// 20 s per agent, and the counter is the signal.
    pub fn grpc_denied(&self, service: GuardedService, token_sent: bool) {
        self.grpc_denied.get_or_create(&GrpcDeniedLabels { service: service.as_str() }).inc();
        tracing::debug!(
            service = service.as_str(),
            token_sent,
            "Refused a call with PERMISSION_DENIED: the Authentication metadata does not match."
        );
    }

    /// A staged rollout recorded an event: a revert, an abort or a wave no gate judged is a warning,
    /// the rest news.
    pub fn rollout_event(&self, rollout: &str, kind: &str, message: &str) {
        self.rollout_events.get_or_create(&RolloutEventLabels { kind: kind.to_owned() }).inc();
        if matches!(kind, "reverted" | "aborted" | "failed" | "unjudged") {
            tracing::warn!(rollout, kind, "{message}");
        } else {
            tracing::info!(rollout, kind, "{message}");
        }
    }

    /// An admin request was turned away.
    pub fn admin_denied(&self, denial: AdminDenial, method: &http::Method, path: &str) {
        let status = match denial {
            AdminDenial::Unauthenticated => "401",
            AdminDenial::ReadOnly => "403",
        };
        self.admin_denied.get_or_create(&AdminDeniedLabels { status }).inc();
        tracing::info!(status, %method, path, "Refused an admin request for its bearer token.");
    }

    /// An admin request was refused by the browser checks (403), for `why`: a rebound host name
    /// or a cross-site write is what an attack looks like (WARN); a write a form could send is
    /// more often a client without a content type (INFO).
    pub fn admin_refused(&self, reason: BrowserRefusal, method: &http::Method, path: &str, why: &str) {
        self.admin_refused.get_or_create(&AdminRefusedLabels { reason: reason.as_str() }).inc();
        let reason = reason.as_str();
        if reason == BrowserRefusal::Form.as_str() {
            tracing::info!(reason, %method, path, why, "Refused an admin request by the browser checks.");
        } else {
            tracing::warn!(reason, %method, path, why, "Refused an admin request by the browser checks.");
        }
    }
}

/// The events of one origin (a store or file) of agent-configuration documents.
#[derive(Debug, Clone)]
pub struct OriginEvents {
    origin: String,
    reloads: Counter,
    rejected: Counter,
}

impl Default for OriginEvents {
    fn default() -> Self {
        Events::default().for_origin("")
    }
}

impl OriginEvents {
    /// A new table is served.
    pub fn document_installed(&self, version: u64, services: usize) {
        self.reloads.inc();
        tracing::info!(origin = %self.origin, version, services, "Installed new agent configurations.");
    }

    /// The key was deleted: the empty table is served, every service gets EMPTY.
    pub fn document_deleted(&self, version: u64) {
        self.reloads.inc();
        tracing::warn!(origin = %self.origin, version, "The agent configurations were deleted; every service now gets the EMPTY answer.");
    }

    /// A document was refused; the previous table stays (`served`: its services; `None`: none is
    /// served yet).
    pub fn document_rejected(&self, error: &str, served: Option<usize>) {
        self.rejected.inc();
        match served {
            Some(services) => {
                tracing::error!(origin = %self.origin, error, services, "Refused agent configurations; still serving the last good configuration.")
            }
            None => {
                tracing::error!(origin = %self.origin, error, "Refused agent configurations; nothing is served yet: agents get \"no change\" until a good document arrives.")
            }
        }
    }

    /// The document found at start-up was refused: counted (start-up logged it).
    pub fn rejected_at_start(&self) {
        self.rejected.inc();
    }
}
