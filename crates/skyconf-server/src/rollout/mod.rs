//! Staged rollouts: a candidate document served to the fleet in waves, each gated on the fleet's
//! health, reverted on its own when a gate fails.
//!
//! - [`spec`]: what a rollout is asked to do (waves, gates, advance) and the bounds of each part;
//! - [`plan`]: the rollout record and the pure rule that moves it on;
//! - [`driver`]: keeps the record in the store, serves its overlay, runs the rule;
//! - [`sightings`]: what the driver remembers of the fleet between its looks;
//! - [`prometheus`]: the optional gate on a Prometheus query.

pub mod driver;
pub mod plan;
pub mod prometheus;
pub mod sightings;
pub mod spec;

pub use driver::{Keeper, Plan, RolloutError, Rollouts};
pub use plan::{Advance, Gates, Phase, Rollout, WaveSpec};
