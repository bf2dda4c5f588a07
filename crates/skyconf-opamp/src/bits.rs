//! The bit sets OpAMP carries as `uint64` fields: agent and server capabilities, and the flags
//! of each direction. Values as the spec numbers them.

use std::fmt;

/// `AgentToServer.capabilities` bits.
pub mod agent {
    /// Reports status (always set).
    pub const REPORTS_STATUS: u64 = 0x1;
    /// Accepts remote configuration.
    pub const ACCEPTS_REMOTE_CONFIG: u64 = 0x2;
    /// Reports its effective configuration.
    pub const REPORTS_EFFECTIVE_CONFIG: u64 = 0x4;
    /// Accepts package offers.
    pub const ACCEPTS_PACKAGES: u64 = 0x8;
    /// Reports package statuses.
    pub const REPORTS_PACKAGE_STATUSES: u64 = 0x10;
    /// Reports its own traces.
    pub const REPORTS_OWN_TRACES: u64 = 0x20;
    /// Reports its own metrics.
    pub const REPORTS_OWN_METRICS: u64 = 0x40;
    /// Reports its own logs.
    pub const REPORTS_OWN_LOGS: u64 = 0x80;
    /// Accepts connection settings for OpAMP itself.
    pub const ACCEPTS_OPAMP_CONNECTION_SETTINGS: u64 = 0x100;
    /// Accepts connection settings for other destinations.
    pub const ACCEPTS_OTHER_CONNECTION_SETTINGS: u64 = 0x200;
    /// Accepts the restart command.
    pub const ACCEPTS_RESTART_COMMAND: u64 = 0x400;
    /// Reports health.
    pub const REPORTS_HEALTH: u64 = 0x800;
    /// Reports the status of remote configuration.
    pub const REPORTS_REMOTE_CONFIG: u64 = 0x1000;
    /// Sends heartbeats (and follows `heartbeat_interval_seconds`).
    pub const REPORTS_HEARTBEAT: u64 = 0x2000;
    /// Reports its available components.
    pub const REPORTS_AVAILABLE_COMPONENTS: u64 = 0x4000;
}

/// `ServerToAgent.capabilities` bits.
pub mod server {
    /// Accepts status reports (always set).
    pub const ACCEPTS_STATUS: u64 = 0x1;
    /// Offers remote configuration.
    pub const OFFERS_REMOTE_CONFIG: u64 = 0x2;
    /// Accepts effective configuration.
    pub const ACCEPTS_EFFECTIVE_CONFIG: u64 = 0x4;
    /// Offers connection settings.
    pub const OFFERS_CONNECTION_SETTINGS: u64 = 0x20;
}

/// `AgentToServer.flags`: the agent asks the server for an instance uid.
pub const REQUEST_INSTANCE_UID: u64 = 0x1;

/// `ServerToAgent.flags`: the server asks for the agent's full state.
pub const REPORT_FULL_STATE: u64 = 0x1;

/// An agent's capability bits, with names for logs and reports.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Capabilities(pub u64);

const NAMES: [(u64, &str); 15] = [
    (agent::REPORTS_STATUS, "ReportsStatus"),
    (agent::ACCEPTS_REMOTE_CONFIG, "AcceptsRemoteConfig"),
    (agent::REPORTS_EFFECTIVE_CONFIG, "ReportsEffectiveConfig"),
    (agent::ACCEPTS_PACKAGES, "AcceptsPackages"),
    (agent::REPORTS_PACKAGE_STATUSES, "ReportsPackageStatuses"),
    (agent::REPORTS_OWN_TRACES, "ReportsOwnTraces"),
    (agent::REPORTS_OWN_METRICS, "ReportsOwnMetrics"),
    (agent::REPORTS_OWN_LOGS, "ReportsOwnLogs"),
    (agent::ACCEPTS_OPAMP_CONNECTION_SETTINGS, "AcceptsOpAMPConnectionSettings"),
    (agent::ACCEPTS_OTHER_CONNECTION_SETTINGS, "AcceptsOtherConnectionSettings"),
    (agent::ACCEPTS_RESTART_COMMAND, "AcceptsRestartCommand"),
    (agent::REPORTS_HEALTH, "ReportsHealth"),
    (agent::REPORTS_REMOTE_CONFIG, "ReportsRemoteConfig"),
    (agent::REPORTS_HEARTBEAT, "ReportsHeartbeat"),
    (agent::REPORTS_AVAILABLE_COMPONENTS, "ReportsAvailableComponents"),
];

impl Capabilities {
    /// Whether every bit of `bits` is set.
    pub fn has(self, bits: u64) -> bool {
        self.0 & bits == bits
    }

    /// The names of the set bits the spec defines, lowest first.
    pub fn names(self) -> impl Iterator<Item = &'static str> {
        NAMES.into_iter().filter(move |(bit, _)| self.0 & bit != 0).map(|(_, name)| name)
    }
}

impl fmt::Debug for Capabilities {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<_> = self.names().collect();
        let unknown = self.0 & !NAMES.iter().fold(0, |all, (bit, _)| all | bit);
        if unknown == 0 { write!(f, "{}", names.join("|")) } else { write!(f, "{}|{unknown:#x}", names.join("|")) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_bits() {
        let caps = Capabilities(agent::REPORTS_STATUS | agent::REPORTS_HEARTBEAT | 0x10_0000);
        assert_eq!(caps.names().collect::<Vec<_>>(), ["ReportsStatus", "ReportsHeartbeat"]);
        assert_eq!(format!("{caps:?}"), "ReportsStatus|ReportsHeartbeat|0x100000");
        assert!(caps.has(agent::REPORTS_STATUS | agent::REPORTS_HEARTBEAT));
        assert!(!caps.has(agent::ACCEPTS_REMOTE_CONFIG));
    }
}
