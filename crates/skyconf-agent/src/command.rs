//! Reading a `ConfigurationDiscoveryCommand` the way the Java agent reads it.
//!
//! The command's arguments are scanned by key: the last `SerialNumber` and the last `UUID` win,
//! every other pair is a setting, in order. A command that repeats a setting is refused whole (the
//! Java agent's collection step throws and nothing is applied). Commands with any other name are
//! not ours: the Java agent also knows profiling commands, which this crate ignores.

use std::collections::HashMap;

use skyconf_proto::v3::{Command, Commands};

/// The command name agents dispatch on (the proto's comment says `CDS`; agents and the OAP use this).
pub const COMMAND_NAME: &str = "ConfigurationDiscoveryCommand";
/// The argument carrying the per-response serial number.
pub const SERIAL_NUMBER_KEY: &str = "SerialNumber";
/// The argument carrying the configuration digest.
pub const UUID_KEY: &str = "UUID";

/// A configuration-discovery command as the agent reads it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DiscoveryCommand {
    /// The last `SerialNumber` argument, if any.
    pub serial_number: Option<String>,
    /// The last `UUID` argument, if any.
    pub uuid: Option<String>,
    /// Every other argument, in order, duplicates kept.
    pub config: Vec<(String, String)>,
}

/// A command that repeats a setting; it is refused whole, as the Java agent refuses it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the command repeats the setting `{0}`")]
pub struct DuplicateKey(pub String);

impl DiscoveryCommand {
    /// Reads `command` if it is a `ConfigurationDiscoveryCommand`; any other command gives `None`.
    pub fn from_command(command: &Command) -> Option<Self> {
        if command.command != COMMAND_NAME {
            return None;
        }
        let mut out = Self::default();
        for arg in &command.args {
            match arg.key.as_str() {
                SERIAL_NUMBER_KEY => out.serial_number = Some(arg.value.clone()),
                UUID_KEY => out.uuid = Some(arg.value.clone()),
                _ => out.config.push((arg.key.clone(), arg.value.clone())),
            }
        }
        Some(out)
    }

    /// Every configuration-discovery command of a response, in order (the Java agent handles each).
    pub fn all(commands: &Commands) -> Vec<Self> {
        commands.commands.iter().filter_map(Self::from_command).collect()
    }

    /// The settings by key, refusing a repeated key.
    pub fn config_map(&self) -> Result<HashMap<&str, &str>, DuplicateKey> {
        let mut map = HashMap::with_capacity(self.config.len());
        for (k, v) in &self.config {
            if map.insert(k.as_str(), v.as_str()).is_some() {
                return Err(DuplicateKey(k.clone()));
            }
        }
        Ok(map)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use skyconf_proto::v3::KeyStringValuePair;

    fn pair(k: &str, v: &str) -> KeyStringValuePair {
        KeyStringValuePair { key: k.into(), value: v.into() }
    }

    #[test]
    fn last_serial_and_uuid_win_and_order_is_irrelevant() {
        let cmd = Command {
            command: COMMAND_NAME.into(),
            args: vec![pair("k", "1"), pair(UUID_KEY, "u1"), pair(SERIAL_NUMBER_KEY, "s"), pair(UUID_KEY, "u2")],
        };
        let read = DiscoveryCommand::from_command(&cmd).unwrap();
        assert_eq!(read.uuid.as_deref(), Some("u2"));
        assert_eq!(read.serial_number.as_deref(), Some("s"));
        assert_eq!(read.config_map().unwrap().get("k"), Some(&"1"));
    }

    #[test]
    fn a_repeated_setting_is_refused_and_other_commands_are_not_ours() {
        let cmd = Command { command: COMMAND_NAME.into(), args: vec![pair("k", "1"), pair("k", "1")] };
        let read = DiscoveryCommand::from_command(&cmd).unwrap();
        assert_eq!(read.config_map(), Err(DuplicateKey("k".into())));
        let profiling = Command { command: "ProfileTaskQuery".into(), args: vec![] };
        let commands = Commands { commands: vec![profiling, cmd] };
        assert_eq!(DiscoveryCommand::all(&commands).len(), 1);
    }

    #[test]
    fn reads_what_skyconf_core_encodes() {
        let digest = skyconf_core::Digest::of_entries([("a", "1")]);
        let encoded = skyconf_core::codec::encode_command("serial", &digest, [("a", "1")]);
        let read = DiscoveryCommand::from_command(&encoded).unwrap();
        assert_eq!(read.serial_number.as_deref(), Some("serial"));
        assert_eq!(read.uuid.as_deref(), Some(digest.as_str()));
        assert_eq!(read.config, vec![("a".to_owned(), "1".to_owned())]);
    }
}
