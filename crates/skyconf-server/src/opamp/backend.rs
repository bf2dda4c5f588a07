//! [`OpampFleet`]: the OpAMP server's [`Backend`] in skyconf. Remote configurations come from
//! the served table's `opamp:` section, or a staged rollout's candidate for the agents its waves
//! reach ([`super::rollout`]); `watch` follows every install of a table and every change of the
//! rollout overlay (held polls and WebSocket connections then follow the store and the waves);
//! reports keep one row per live agent, removed when its session ends.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use arc_swap::{ArcSwap, ArcSwapOption};
use bytes::Bytes;
use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use skyconf_core::opamp::OpampSection;
use skyconf_opamp::backend::ApplyStatus;
use skyconf_opamp::wire::{self, any_value::Value};
use skyconf_opamp::{
    Agent, Backend, Changes, ConfigFile, ConfigStatus, Disconnect, InstanceUid, RemoteConfig, Report, Transport,
    Unavailable,
};
use utoipa::ToSchema;

use super::effective::{Budget, EffectiveConfig, Kept, MAX_EFFECTIVE_BYTES};
use crate::ServedTable;
use crate::unix_time::now_ms;

/// The remote configuration of each group of one served table, built once per install.
#[derive(Debug, Default)]
pub(super) struct Built {
    /// The served table's version (0 for a rollout's candidate).
    version: u64,
    pub(super) section: OpampSection,
    /// By group index.
    configs: Vec<Arc<RemoteConfig>>,
}

impl Built {
    pub(super) fn new(version: u64, section: &OpampSection) -> Self {
        let configs = section
            .groups()
            .iter()
            .map(|group| {
                Arc::new(RemoteConfig::new(group.files.iter().map(|f| {
                    let body = Bytes::from(f.body.clone().into_bytes());
                    (f.name.clone(), ConfigFile { content_type: f.content_type.clone(), body })
                })))
            })
            .collect();
        Self { version, section: section.clone(), configs }
    }

    /// The group and configuration of an agent described by `description`.
    pub(super) fn of(&self, description: &skyconf_opamp::Description) -> Option<(&str, &Arc<RemoteConfig>)> {
        self.of_attributes(|key| description.get_str(key))
    }

    /// The group and configuration of an agent whose string attributes `attribute` reads.
    pub(super) fn of_attributes<'a>(
        &self,
        attribute: impl Fn(&str) -> Option<&'a str> + Copy,
    ) -> Option<(&str, &Arc<RemoteConfig>)> {
        let (index, group) = self.section.group_of(attribute)?;
        Some((group.name.as_str(), &self.configs[index]))
    }
}

/// One live agent, as its reports left it.
#[derive(Debug, Clone)]
pub(super) struct Row {
    pub(super) transport: Transport,
    pub(super) description: Arc<skyconf_opamp::Description>,
    pub(super) capabilities: skyconf_opamp::bits::Capabilities,
    /// Its polls held now.
    pub(super) holding: u32,
    health: Option<HealthView>,
    pub(super) status: Option<ConfigStatusView>,
    pub(super) effective_config_hash: Option<String>,
    /// The contents of that configuration, when the budget keeps them.
    effective: Option<Arc<Kept>>,
    connected_ms: u64,
    pub(super) last_report_ms: u64,
}

/// The agent's health (`ComponentHealth`, without its components).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct HealthView {
    /// Whether it says it is healthy.
    pub healthy: bool,
    /// Its status text.
    pub status: String,
    /// Its last error.
    pub last_error: String,
}

/// The `RemoteConfigStatus` an agent last reported.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ConfigStatusView {
    /// `applied`, `applying`, `failed` or `unset`.
    #[schema(value_type = String)]
    pub status: Cow<'static, str>,
    /// The `config_hash` it reports about, hex.
    pub config_hash: String,
    /// Why it failed, if it did.
    pub error_message: String,
}

/// One description attribute.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AttributeView {
    /// Its key (`service.name`, `host.name`, …).
    pub key: String,
    /// Its value as text.
    pub value: String,
    /// Whether it is an identifying attribute.
    pub identifying: bool,
    /// Whether its value is a string (another is shown as text, and no group's `match` reads it).
    #[serde(default = "string_by_default")]
    pub string: bool,
}

fn string_by_default() -> bool {
    true
}

/// One row of `GET /api/v1/opamp/agents`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct OpampAgentRow {
    /// Its instance uid, hex (16 bytes).
    pub uid: String,
    /// `http` or `websocket`.
    #[schema(value_type = String)]
    pub transport: Cow<'static, str>,
    /// Its description, identifying attributes first.
    pub attributes: Vec<AttributeView>,
    /// Its key in a rollout's waves: its `service.instance.id` attribute, else its uid.
    #[serde(default)]
    pub instance: String,
    /// Whether it accepts remote configuration (only such an agent is judged by a rollout).
    #[serde(default)]
    pub accepts_remote_config: bool,
    /// Its health, if it reports it.
    pub health: Option<HealthView>,
    /// The status of the remote configuration it last received, if it reported one.
    pub remote_config_status: Option<ConfigStatusView>,
    /// The hash (as `config_hash` is computed) of the effective configuration it reported.
    pub effective_config_hash: Option<String>,
    /// The `opamp:` group it belongs to now, if any.
    pub group: Option<String>,
    /// The `config_hash` of what it is offered now, if anything.
    pub offered_hash: Option<String>,
    /// Whether its reported status is about what it is offered now.
    pub current: bool,
    /// When its session started (Unix ms).
    pub connected_ms: u64,
    /// When it last reported (Unix ms).
    pub last_report_ms: u64,
    /// When it was last seen (Unix ms): now while its WebSocket is open or one of its polls is
    /// held, else when it last reported.
    #[serde(default)]
    pub last_seen_ms: u64,
}

/// The [`Backend`] over the served table, and the live OpAMP agents.
#[derive(Debug)]
pub struct OpampFleet {
    pub(super) served: Arc<ServedTable>,
    built: ArcSwap<Built>,
    /// The configurations of the rollout candidate's section last asked for.
    candidate: ArcSwapOption<Built>,
    rows: Mutex<HashMap<InstanceUid, Row>>,
    /// What the agents' effective configurations kept take together.
    budget: Budget,
}

/// An agent's effective configuration as `GET /api/v1/opamp/agents/{uid}/effective` shows it.
#[derive(Debug, Clone)]
pub(crate) struct Effective {
    /// Its hash, as `config_hash` is computed; `None` when it reported none.
    pub(crate) hash: Option<String>,
    /// Its contents, when kept.
    pub(crate) config: Option<EffectiveConfig>,
}

impl OpampFleet {
    /// A backend answering from `served`.
    pub fn new(served: Arc<ServedTable>) -> Self {
        Self {
            served,
            built: ArcSwap::from_pointee(Built::default()),
            candidate: ArcSwapOption::empty(),
            rows: Mutex::default(),
            budget: Budget::default(),
        }
    }

    pub(super) fn rows(&self) -> MutexGuard<'_, HashMap<InstanceUid, Row>> {
        self.rows.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The groups' configurations of the table served now (built again after each install).
    pub(super) fn built(&self) -> Arc<Built> {
        let snapshot = self.served.snapshot();
        let built = self.built.load_full();
        if built.version == snapshot.version {
            return built;
        }
        let fresh = Arc::new(Built::new(snapshot.version, snapshot.table.opamp()));
        self.built.store(Arc::clone(&fresh));
        fresh
    }

    /// The groups' configurations of a rollout candidate's `section` (built again when it
    /// changes).
    pub(super) fn candidate(&self, section: &OpampSection) -> Arc<Built> {
        if let Some(built) = self.candidate.load_full().filter(|b| b.section == *section) {
            return built;
        }
        let fresh = Arc::new(Built::new(0, section));
        self.candidate.store(Some(Arc::clone(&fresh)));
        fresh
    }

    /// The live agents, by uid.
    pub fn agents(&self) -> Vec<OpampAgentRow> {
        let (built, now) = (self.built(), now_ms());
        let rows: Vec<(InstanceUid, Row)> = self.rows().iter().map(|(uid, row)| (*uid, row.clone())).collect();
        let mut out: Vec<OpampAgentRow> = rows
            .into_iter()
            .map(|(uid, row)| {
                let offered = built.of(&row.description);
                let offered_hash = offered.map(|(_, config)| config.hash().to_string());
                let current = matches!((&row.status, &offered_hash), (Some(s), Some(h)) if s.config_hash == *h);
                let uid = hex(uid.as_bytes());
                let live = row.transport == Transport::WebSocket || row.holding > 0;
                OpampAgentRow {
                    instance: super::rollout::key(&uid, &row.description),
                    accepts_remote_config: row.capabilities.has(skyconf_opamp::bits::agent::ACCEPTS_REMOTE_CONFIG),
                    last_seen_ms: if live { now } else { row.last_report_ms },
                    uid,
                    transport: Cow::Borrowed(match row.transport {
                        Transport::Http => "http",
                        Transport::WebSocket => "websocket",
                    }),
                    attributes: attributes(&row.description),
                    health: row.health,
                    remote_config_status: row.status,
                    effective_config_hash: row.effective_config_hash,
                    group: offered.map(|(group, _)| group.to_owned()),
                    offered_hash,
                    current,
                    connected_ms: row.connected_ms,
                    last_report_ms: row.last_report_ms,
                }
            })
            .collect();
        out.sort_by(|a, b| a.uid.cmp(&b.uid));
        out
    }

    /// The effective configuration of the live agent whose uid is `uid` (hex); `None` when no
    /// agent here has it.
    pub(crate) fn effective(&self, uid: &str) -> Option<Effective> {
        let rows = self.rows();
        let (_, row) = rows.iter().find(|(key, _)| hex(key.as_bytes()).eq_ignore_ascii_case(uid))?;
        Some(Effective {
            hash: row.effective_config_hash.clone(),
            config: row.effective.as_ref().map(|kept| kept.config.clone()),
        })
    }

    /// Live agents by the status of their last `RemoteConfigStatus` (`none`: not reported).
    pub fn counts(&self) -> [(&'static str, u64); 5] {
        let mut counts = [("none", 0), ("unset", 0), ("applying", 0), ("applied", 0), ("failed", 0)];
        for row in self.rows().values() {
            let status = row.status.as_ref().map_or("none", |s| &*s.status);
            if let Some(slot) = counts.iter_mut().find(|(name, _)| *name == status) {
                slot.1 += 1;
            }
        }
        counts
    }
}

fn status_name(status: ApplyStatus) -> &'static str {
    match status {
        ApplyStatus::Unset => "unset",
        ApplyStatus::Applying => "applying",
        ApplyStatus::Applied => "applied",
        ApplyStatus::Failed => "failed",
    }
}

pub(super) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

fn text(value: Option<&wire::AnyValue>) -> String {
    match value.and_then(|v| v.value.as_ref()) {
        Some(Value::StringValue(s)) => s.clone(),
        Some(Value::BoolValue(b)) => b.to_string(),
        Some(Value::IntValue(i)) => i.to_string(),
        Some(Value::DoubleValue(d)) => d.to_string(),
        Some(Value::BytesValue(b)) => hex(b),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

fn attributes(description: &skyconf_opamp::Description) -> Vec<AttributeView> {
    let d = &description.wire;
    let identifying = d.identifying_attributes.iter().map(|kv| (kv, true));
    let other = d.non_identifying_attributes.iter().map(|kv| (kv, false));
    identifying
        .chain(other)
        .map(|(kv, identifying)| AttributeView {
            key: kv.key.clone(),
            value: text(kv.value.as_ref()),
            identifying,
            string: matches!(kv.value.as_ref().and_then(|v| v.value.as_ref()), Some(Value::StringValue(_))),
        })
        .collect()
}

impl Backend for OpampFleet {
    fn remote_config(&self, agent: &Agent) -> Result<Option<Arc<RemoteConfig>>, Unavailable> {
        if !self.served.snapshot().ready() {
            return Err(Unavailable { reason: "no configuration is loaded yet".into(), retry_after: None });
        }
        let built = self.built();
        let offered = built.of(&agent.description);
        if let Some(candidate) = self.rollout_offer(agent, offered) {
            return Ok(candidate);
        }
        Ok(offered.map(|(_, config)| Arc::clone(config)))
    }

    fn watch(&self, _agent: &Agent) -> Changes {
        // Installs and rollout waves: a wave's start or revert is offered at once.
        self.served.subscribe_answers()
    }

    fn report(&self, agent: &Agent, report: Report<'_>) {
        let now = now_ms();
        // Cut before the lock: a copy of at most MAX_EFFECTIVE_BYTES.
        let contents = match &report {
            Report::EffectiveConfig(effective) => Some(EffectiveConfig::of(effective, MAX_EFFECTIVE_BYTES)),
            _ => None,
        };
        let mut rows = self.rows();
        if matches!(report, Report::Holding(false)) && !rows.contains_key(&agent.uid) {
            // The end of a hold whose session ended first: no row to bring back.
            return;
        }
        let row = rows.entry(agent.uid).or_insert_with(|| Row {
            transport: agent.transport,
            description: Arc::clone(&agent.description),
            health: None,
            status: None,
            effective_config_hash: None,
            effective: None,
            capabilities: agent.capabilities,
            holding: 0,
            connected_ms: now,
            last_report_ms: now,
        });
        row.transport = agent.transport;
        row.capabilities = agent.capabilities;
        row.description = Arc::clone(&agent.description);
        row.last_report_ms = now;
        match report {
            Report::Connected => row.connected_ms = now,
            Report::Health(health) => {
                row.health = Some(HealthView {
                    healthy: health.healthy,
                    status: health.status.clone(),
                    last_error: health.last_error.clone(),
                });
            }
            Report::EffectiveConfig(effective) => {
                let files = effective.config_map.iter().flat_map(|m| &m.config_map).map(|(name, file)| {
                    (name.clone(), ConfigFile { content_type: file.content_type.clone(), body: file.body.clone() })
                });
                row.effective_config_hash = Some(RemoteConfig::new(files).hash().to_string());
                // The previous contents give their bytes back before the new ones are counted.
                row.effective = None;
                row.effective = contents.and_then(|c| self.budget.keep(c)).map(Arc::new);
            }
            Report::RemoteConfigStatus(status) => row.status = Some(view(status)),
            Report::Holding(true) => row.holding = row.holding.saturating_add(1),
            Report::Holding(false) => row.holding = row.holding.saturating_sub(1),
            // The description is kept above, and every report (a heartbeat too) moves
            // `last_report_ms` on; capabilities are not listed.
            _ => {}
        }
    }

    fn disconnected(&self, agent: &Agent, why: Disconnect) {
        self.rows().remove(&agent.uid);
        tracing::debug!(uid = %agent.uid, ?why, "An OpAMP agent's session ended.");
    }
}

fn view(status: &ConfigStatus) -> ConfigStatusView {
    ConfigStatusView {
        status: Cow::Borrowed(status_name(status.status)),
        config_hash: status.hash.to_string(),
        error_message: status.error_message.clone(),
    }
}
