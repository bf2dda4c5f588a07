//! Staged rollouts.

pub mod prometheus;
