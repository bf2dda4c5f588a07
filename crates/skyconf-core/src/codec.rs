//! The `ConfigurationDiscoveryCommand`, both ways.
//!
//! On the wire a configuration answer is `Commands` holding one `Command` named
//! `ConfigurationDiscoveryCommand` whose args are `SerialNumber` (a fresh random UUID v4 per
//! response: the Java agent drops serials it has seen), then `UUID` (the digest), then one pair per
//! setting. "No change" is a `Commands` with no command at all.
//!
//! [`PreEncoded`] holds a whole answer encoded once per reload with a placeholder serial, so serving
//! a call is a copy and a 36-byte patch.

use std::ops::Range;

use bytes::Bytes;
use prost::Message;
use skyconf_proto::v3::{Command, Commands, KeyStringValuePair};
use uuid::Uuid;

use crate::digest::Digest;

/// The command name agents dispatch on. (The proto's comment says `CDS`; agents and the OAP use this.)
pub const COMMAND_NAME: &str = "ConfigurationDiscoveryCommand";
/// The argument carrying the per-response serial number.
pub const SERIAL_NUMBER_KEY: &str = "SerialNumber";
/// The argument carrying the configuration digest.
pub const UUID_KEY: &str = "UUID";

/// Length of a hyphenated UUID.
const SERIAL_LEN: usize = 36;
const SERIAL_PLACEHOLDER: &str = "00000000-0000-0000-0000-000000000000";

/// A fresh serial number: a random (version 4) UUID, lowercase and hyphenated.
pub fn new_serial_number() -> String {
    Uuid::new_v4().hyphenated().to_string()
}

/// The command for a digest and its settings, arguments in the OAP's order.
pub fn encode_command<'a>(
    serial_number: &str,
    digest: &Digest,
    entries: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Command {
    let pair = |key: &str, value: &str| KeyStringValuePair { key: key.to_owned(), value: value.to_owned() };
    let mut args = vec![pair(SERIAL_NUMBER_KEY, serial_number), pair(UUID_KEY, digest.as_str())];
    args.extend(entries.into_iter().map(|(k, v)| pair(k, v)));
    Command { command: COMMAND_NAME.to_owned(), args }
}

/// The size in bytes of the encoded `Commands` that [`PreEncoded::new`] would build, computed
/// without building it (so an oversized answer can be refused before its memory is spent).
pub fn encoded_len<'a>(digest: &Digest, entries: impl IntoIterator<Item = (&'a str, &'a str)>) -> usize {
    use prost::encoding::encoded_len_varint;
    // A length-delimited field with a one-byte key (every field number here is below 16).
    let delimited = |len: usize| 1 + encoded_len_varint(len as u64) + len;
    // proto3 leaves an empty string out.
    let string = |text: &str| if text.is_empty() { 0 } else { delimited(text.len()) };
    let arg = |key: &str, value: &str| delimited(string(key) + string(value));
    let mut command =
        string(COMMAND_NAME) + arg(SERIAL_NUMBER_KEY, SERIAL_PLACEHOLDER) + arg(UUID_KEY, digest.as_str());
    for (key, value) in entries {
        command = command.saturating_add(arg(key, value));
    }
    delimited(command)
}

/// An answer encoded once, served many times with a fresh serial number patched in.
#[derive(Debug, Clone)]
pub struct PreEncoded {
    bytes: Bytes,
    serial: Range<usize>,
}

impl PreEncoded {
    /// Encodes `Commands{[command for digest, entries]}`.
    pub fn new<'a>(digest: &Digest, entries: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        let commands = Commands { commands: vec![encode_command(SERIAL_PLACEHOLDER, digest, entries)] };
        let bytes = commands.encode_to_vec();
        // The serial is the first argument, so the first occurrence of the placeholder is it.
        let start = bytes
            .windows(SERIAL_LEN)
            .position(|w| w == SERIAL_PLACEHOLDER.as_bytes())
            .expect("the placeholder serial is in the encoding");
        Self { bytes: bytes.into(), serial: start..start + SERIAL_LEN }
    }

    /// The encoded `Commands` with `serial` in place.
    pub fn with_serial(&self, serial: Uuid) -> Bytes {
        let mut out = self.bytes.to_vec();
        serial.hyphenated().encode_lower(&mut out[self.serial.clone()]);
        out.into()
    }

    /// The encoded `Commands` with a fresh random serial.
    pub fn with_fresh_serial(&self) -> Bytes {
        self.with_serial(Uuid::new_v4())
    }

    /// Encoded length in bytes.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Never true: an answer always holds a command.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

/// A configuration-discovery command as an agent reads it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DiscoveryCommand {
    /// The last `SerialNumber` argument, if any.
    pub serial_number: Option<String>,
    /// The last `UUID` argument, if any.
    pub uuid: Option<String>,
    /// Every other argument, in order (duplicates kept).
    pub config: Vec<(String, String)>,
}

/// A command that repeats a setting; the Java agent rejects it whole.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the command repeats the setting `{0}`")]
pub struct DuplicateKey(pub String);

impl DiscoveryCommand {
    /// Reads `command` if it is a `ConfigurationDiscoveryCommand`; other commands give `None`.
    /// Like the Java agent, the last `SerialNumber` and `UUID` win and order is irrelevant.
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

    /// Every configuration-discovery command of a response, in order: the Java agent's
    /// `CommandService` handles each one (behaviour reference §4.1.3).
    pub fn all(commands: &Commands) -> Vec<Self> {
        commands.commands.iter().filter_map(Self::from_command).collect()
    }

    /// The first configuration-discovery command of a response (skyconf sends at most one).
    pub fn find(commands: &Commands) -> Option<Self> {
        commands.commands.iter().find_map(Self::from_command)
    }

    /// The settings as a map, refusing a repeated key as the Java agent does.
    pub fn config_map(&self) -> Result<indexmap::IndexMap<&str, &str>, DuplicateKey> {
        let mut map = indexmap::IndexMap::with_capacity(self.config.len());
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

    #[test]
    fn pre_encoded_answer_equals_a_fresh_encoding_with_the_same_serial() {
        let digest = Digest::of_entries([("a", "1"), ("b", "x")]);
        let pre = PreEncoded::new(&digest, [("a", "1"), ("b", "x")]);
        let serial = Uuid::new_v4();
        let expected =
            Commands { commands: vec![encode_command(&serial.to_string(), &digest, [("a", "1"), ("b", "x")])] }
                .encode_to_vec();
        assert_eq!(pre.with_serial(serial).as_ref(), expected.as_slice());
    }

    #[test]
    fn encoded_len_is_the_length_of_the_encoding() {
        let digest = Digest::of_entries([("k", "v")]);
        let long = "é".repeat(100_000);
        for entries in [
            vec![],
            vec![("k", "v")],
            vec![("", ""), ("k", "")],
            vec![("agent.ignore_suffix", long.as_str()), (long.as_str(), "x")],
        ] {
            assert_eq!(encoded_len(&digest, entries.clone()), PreEncoded::new(&digest, entries).len());
        }
    }

    #[test]
    fn placeholder_inside_a_value_does_not_confuse_the_patch() {
        let digest = Digest::empty();
        let pre = PreEncoded::new(&digest, [("k", SERIAL_PLACEHOLDER)]);
        let decoded = Commands::decode(pre.with_fresh_serial()).unwrap();
        let cmd = DiscoveryCommand::find(&decoded).unwrap();
        assert_ne!(cmd.serial_number.as_deref(), Some(SERIAL_PLACEHOLDER));
        assert_eq!(cmd.config, vec![("k".to_owned(), SERIAL_PLACEHOLDER.to_owned())]);
    }

    #[test]
    fn every_answer_gets_a_fresh_v4_serial() {
        let pre = PreEncoded::new(&Digest::empty(), []);
        let a = DiscoveryCommand::find(&Commands::decode(pre.with_fresh_serial()).unwrap()).unwrap();
        let b = DiscoveryCommand::find(&Commands::decode(pre.with_fresh_serial()).unwrap()).unwrap();
        let (a, b) = (a.serial_number.unwrap(), b.serial_number.unwrap());
        assert_ne!(a, b);
        for s in [a, b] {
            let parsed = Uuid::parse_str(&s).unwrap();
            assert_eq!(parsed.get_version_num(), 4);
            assert_eq!(s, s.to_lowercase());
            assert_eq!(s.len(), 36);
        }
    }

    #[test]
    fn decoding_follows_the_java_agent() {
        let pair = |k: &str, v: &str| KeyStringValuePair { key: k.into(), value: v.into() };
        let cmd = Command {
            command: COMMAND_NAME.into(),
            args: vec![
                pair("k", "1"),
                pair(UUID_KEY, "u1"),
                pair(SERIAL_NUMBER_KEY, "s"),
                pair(UUID_KEY, "u2"),
                pair("k", "2"),
            ],
        };
        let decoded = DiscoveryCommand::from_command(&cmd).unwrap();
        assert_eq!(decoded.uuid.as_deref(), Some("u2"));
        assert_eq!(decoded.serial_number.as_deref(), Some("s"));
        assert_eq!(decoded.config_map(), Err(DuplicateKey("k".into())));
        let other = Command { command: "CDS".into(), args: vec![] };
        assert!(DiscoveryCommand::from_command(&other).is_none());
    }

    #[test]
    fn every_discovery_command_of_a_response_is_read_and_others_are_not_ours() {
        let ours = encode_command("s", &Digest::empty(), [("k", "1")]);
        let profiling = Command { command: "ProfileTaskQuery".into(), args: vec![] };
        let commands = Commands { commands: vec![ours.clone(), profiling, ours] };
        assert_eq!(DiscoveryCommand::all(&commands).len(), 2);
    }

    #[test]
    fn arguments_come_in_the_oap_order() {
        let cmd = encode_command("s", &Digest::empty(), [("x", "1")]);
        let keys: Vec<_> = cmd.args.iter().map(|a| a.key.as_str()).collect();
        assert_eq!(keys, [SERIAL_NUMBER_KEY, UUID_KEY, "x"]);
        assert_eq!(cmd.command, "ConfigurationDiscoveryCommand");
    }
}
