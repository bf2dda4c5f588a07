//! Staged rollouts: a candidate document served to the fleet in waves, each gated on the fleet's
//! health, reverted on its own when a gate fails.
//!
//! - [`plan`]: the rollout record and the pure rule that moves it on;
//! - [`driver`]: keeps the record in the store, serves its overlay, runs the rule;
//! - [`sightings`]: what the driver remembers of the fleet between its looks;
//! - [`prometheus`]: the optional gate on a Prometheus query.

pub mod driver;
pub mod plan;
pub mod prometheus;
pub mod sightings;

pub use driver::{Keeper, Plan, RolloutError, Rollouts};
pub use plan::{Advance, Gates, Phase, Rollout, WaveSpec};
