//! skyconf's pure core: everything that decides a byte an agent sees, with no I/O.
//!
//! - `reader` (the default `reader` feature): agent-configurations YAML → [`AgentConfigurations`], typed as SnakeYAML (YAML 1.1)
//!   types it and stringified as Java prints it;
//! - [`answer`]: the per-service answer table and the reply rule (which bytes a poll gets);
//! - [`backoff`]: the retry policy (exponential back-off with equal jitter) and its generator;
//! - [`digest`]: the per-service SHA-512 digest agents echo back;
//! - [`guard`]: whether a new table would reset most of the fleet at once;
//! - [`codec`]: the `ConfigurationDiscoveryCommand`, encoded (once per reload) and decoded;
//! - [`table`]: the table itself; [`targeting`]: settings for some of a service's instances; [`diff`]: what changed between two of them;
//! - [`writer`]: a table written back as a document that reads to the same digests;
//! - [`store`]: the OAP's dynamic-configuration store model and its change-detection rules;
//! - [`ignore`]: which operation names a Java agent ignores under `agent.trace.ignore_path` and
//!   `agent.ignore_suffix`;
//! - [`layers`]: where each value an agent is served comes from, and which paths it ignores;
//! - [`keys`]: the settings stock agents read and how each parses them; [`suggest`]: "did you
//!   mean"; `warnings` (with `reader`): what is probably wrong with a document skyconf would serve.
//!
//! Golden vectors from the OAP's own loader pin all of it (`tests/`).

pub mod answer;
pub mod backoff;
pub mod codec;
pub mod diff;
pub mod digest;
#[cfg(any(test, feature = "fixtures"))]
pub mod fixtures;
pub mod guard;
pub mod ignore;
pub mod keys;
pub mod layers;
pub mod opamp;
pub mod opamp_diff;
#[cfg(feature = "reader")]
pub mod reader;
pub mod store;
pub mod suggest;
pub mod table;
pub mod targeting;
#[cfg(feature = "reader")]
pub mod warnings;
pub mod writer;

pub use digest::Digest;
#[cfg(feature = "reader")]
pub use reader::{KeyPositions, Position, ReadError, ReadWarning, Reading, read, read_with_warnings};
pub use table::{AgentConfigurations, ServiceConfig};
